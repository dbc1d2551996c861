#include "common/command_line.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/flag_check.h"

namespace strata {
namespace {

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

std::vector<std::string> ParseCommandLine(const char* usage, int argc,
                                          char** argv) {
  absl::FlagsUsageConfig config;
  // Show our flags, not the ones libraries define.
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  // --version: "<program> <version>", one line, for scripts and bug reports.
  const std::string program = argc > 0 ? Basename(argv[0]) : "strata";
  config.version_string = [program] {
    return absl::StrCat(program, " ", STRATA_VERSION, "\n");
  };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  if (absl::Status flags = CheckCommandLineFlags(argc, argv); !flags.ok()) {
    std::fprintf(stderr, "%s: %s (see --help)\n",
                 argc > 0 ? Basename(argv[0]) : "strata",
                 std::string(flags.message()).c_str());
    std::exit(kUsageExitCode);
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  return std::vector<std::string>(positional.begin(), positional.end());
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << port << "\n";
    out.close();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write --port_file ", path,
                                              ": ", std::strerror(errno)));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write --port_file ", path,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace strata
