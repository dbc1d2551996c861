#ifndef STRATA_COMMON_CLOCK_H_
#define STRATA_COMMON_CLOCK_H_

#include "absl/time/time.h"

namespace strata {

// Source of time. Inject it (Options::clock) so that tests can use a fake.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration duration) = 0;

  // The process-wide real clock; never deleted.
  static Clock* Real();
};

}  // namespace strata

#endif  // STRATA_COMMON_CLOCK_H_
