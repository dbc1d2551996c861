#ifndef STRATA_COMMON_COMMAND_LINE_H_
#define STRATA_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strata {

// Exit code of a program given bad flags or arguments.
inline constexpr int kUsageExitCode = 2;

// Parses absl flags with `usage` as the --help header, listing every flag of
// the program (not only those defined in its main file); --version prints
// "<program> <version>" and exits 0. Returns the
// positional arguments, program name first. An unknown flag or a bad flag
// value prints "<program>: <problem> (see --help)" and exits with
// kUsageExitCode.
std::vector<std::string> ParseCommandLine(const char* usage, int argc,
                                          char** argv);

// Writes `port` to `path` for scripts and tests that start a daemon with
// --port=0. Written under a temporary name and renamed, so that a reader
// never sees a partial number.
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace strata

#endif  // STRATA_COMMON_COMMAND_LINE_H_
