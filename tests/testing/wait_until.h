#ifndef STRATA_TESTS_TESTING_WAIT_UNTIL_H_
#define STRATA_TESTS_TESTING_WAIT_UNTIL_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace strata {
namespace testing {

// Calls `done` every `poll` until it returns true (then true) or `timeout`
// has passed (then false): a wait on a condition with a deadline, instead
// of a sleep that hopes the condition holds by then.
inline bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
                      absl::Duration poll = absl::Milliseconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_WAIT_UNTIL_H_
