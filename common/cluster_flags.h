#ifndef STRATA_COMMON_CLUSTER_FLAGS_H_
#define STRATA_COMMON_CLUSTER_FLAGS_H_

// --cluster_file for the programs that can take their settings from a
// cluster file (common/cluster_file.h).

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "common/cluster_file.h"

ABSL_DECLARE_FLAG(std::string, cluster_file);

namespace strata {

// Like ParseCommandLine (common/command_line.h), but when argv names a
// --cluster_file, the flags that file gives this program (`role`; the member
// index is --shard_index or --rank from argv) come first, so that the
// command line overrides them. A cluster file that cannot be read or parsed,
// names no such member, or gives a flag the program lacks or a value it
// cannot parse, prints the file and field and exits with kUsageExitCode.
std::vector<std::string> ParseCommandLineWithCluster(const char* usage,
                                                     int argc, char** argv,
                                                     ClusterRole role);

}  // namespace strata

#endif  // STRATA_COMMON_CLUSTER_FLAGS_H_
