#ifndef STRATA_TESTS_TESTING_CHILD_PROCESS_H_
#define STRATA_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace strata {
namespace testing {

// Starts this test binary again, as a child process that runs only the
// tests `gtest_filter` selects, with `variable`=`value` added to the front
// of its environment: the child's test runs only where `variable` is set,
// and reads its arguments from it. A fresh process, because a bare fork()
// would copy the locks of this process's threads (RocksDB's pools, gRPC's
// pollers) without the threads. With `quiet_stdout`, the child's standard
// output goes to /dev/null. Returns the child's pid, or INTERNAL naming why
// it could not be started. The caller kills and reaps it.
absl::StatusOr<pid_t> SpawnThisTestAsChild(const std::string& gtest_filter,
                                           const std::string& variable,
                                           const std::string& value,
                                           bool quiet_stdout = false);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_CHILD_PROCESS_H_
