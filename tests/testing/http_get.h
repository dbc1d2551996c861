#ifndef STRATA_TESTS_TESTING_HTTP_GET_H_
#define STRATA_TESTS_TESTING_HTTP_GET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace testing {

// GET http://127.0.0.1:<port><path>; returns the body of a 200 answer.
// Each socket operation times out after 5 s.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// The value of the sample `series` (name and labels) in Prometheus text.
absl::StatusOr<double> SampleValue(absl::string_view text,
                                   absl::string_view series);

// The families of Prometheus text that have a TYPE line but no HELP line.
std::vector<std::string> FamiliesWithoutHelp(absl::string_view text);

// The metrics port a daemon bound, from its start line ("... serving on
// ... metrics_port=N ...").
absl::StatusOr<int> MetricsPort(const ServerProcess& server);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_HTTP_GET_H_
