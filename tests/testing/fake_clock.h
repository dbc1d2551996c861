#ifndef STRATA_TESTS_TESTING_FAKE_CLOCK_H_
#define STRATA_TESTS_TESTING_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace strata {
namespace testing {

// A clock that moves only when told: Advance() or SleepFor(). Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Sleeping advances the fake time; it never blocks.
  void SleepFor(absl::Duration duration) override { Advance(duration); }
  void Advance(absl::Duration duration) {
    absl::MutexLock lock(&mu_);
    now_ += duration;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_FAKE_CLOCK_H_
