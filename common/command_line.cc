#include "common/command_line.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace strata {

std::vector<std::string> ParseCommandLine(const char* usage, int argc,
                                          char** argv) {
  absl::FlagsUsageConfig config;
  // Show our flags, not the ones libraries define.
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace strata
