#include "common/clock.h"

#include "absl/time/clock.h"

namespace strata {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override { absl::SleepFor(duration); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace strata
