#ifndef STRATA_TESTS_TESTING_SERVED_ROWS_H_
#define STRATA_TESTS_TESTING_SERVED_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/serving_client.h"
#include "gtest/gtest.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace testing {

// Success once `client` answers a lookup of `keys` in `table` with exactly
// `expected` (keys.size() x dim floats), waiting up to `timeout` for a
// serving PS that follows training to catch up; otherwise a failure saying
// how many values still differed. Header-only: its users link the serving
// client, the other tests need not.
inline ::testing::AssertionResult ServesRows(
    ServingClient& client, absl::string_view table,
    absl::Span<const uint64_t> keys, const std::vector<float>& expected,
    absl::Duration timeout = absl::Seconds(60)) {
  std::vector<float> served(expected.size());
  size_t wrong = expected.size();
  absl::Status looked_up;
  const bool equal = WaitUntil(
      [&] {
        looked_up = client.Lookup(table, keys, absl::MakeSpan(served));
        if (!looked_up.ok()) return false;
        wrong = 0;
        for (size_t i = 0; i < served.size(); ++i) {
          wrong += served[i] != expected[i];
        }
        return wrong == 0;
      },
      timeout);
  if (equal) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << wrong << " of " << served.size()
         << " served values differ (last lookup: " << looked_up << ")";
}

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_SERVED_ROWS_H_
