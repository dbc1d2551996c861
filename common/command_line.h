#ifndef STRATA_COMMON_COMMAND_LINE_H_
#define STRATA_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

namespace strata {

// Parses absl flags with `usage` as the --help header, listing every flag of
// the program (not only those defined in its main file). Returns the
// positional arguments, program name first.
std::vector<std::string> ParseCommandLine(const char* usage, int argc,
                                          char** argv);

}  // namespace strata

#endif  // STRATA_COMMON_COMMAND_LINE_H_
