#include "common/command_line.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/flag_check.h"

namespace strata {
namespace {

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

// The --help heading of the flags defined in `file` (a build path): what
// the shared flag files are for, else the file's path in the source tree.
std::string FlagGroupName(absl::string_view file) {
  static constexpr struct {
    const char* file;
    const char* purpose;
  } kShared[] = {
      {"common/cluster_flags.cc", "the cluster file (shared)"},
      {"common/daemon_flags.cc", "every daemon (ports, TLS, tokens, logs)"},
      {"common/client_flags.cc",
       "every client (addresses, TLS, tokens, retries)"},
  };
  for (const auto& shared : kShared) {
    if (absl::EndsWith(file, shared.file)) return shared.purpose;
  }
  // Abseil's own flags keep "absl/" (contains_help_flags leaves them out).
  if (const size_t absl_dir = file.rfind("absl/");
      absl_dir != absl::string_view::npos) {
    return std::string(file.substr(absl_dir));
  }
  static constexpr const char* kSourceDirs[] = {
      "bench/",   "common/",     "coordination/", "embedding/", "server/",
      "serving/", "tensorflow/", "tools/",        "worker/"};
  size_t start = absl::string_view::npos;
  for (const char* dir : kSourceDirs) {
    const size_t at = file.rfind(absl::StrCat("/", dir));
    if (at != absl::string_view::npos &&
        (start == absl::string_view::npos || at > start)) {
      start = at;
    }
  }
  if (start == absl::string_view::npos) {
    start = file.rfind('/');  // Only the file's own name.
    return std::string(
        start == absl::string_view::npos ? file : file.substr(start + 1));
  }
  return std::string(file.substr(start + 1));
}

// Whether argv asks for help (--help, --helpfull, --helpshort,
// --helppackage, --helpmatch=S), telling absl which kind.
bool DeduceHelpRequest(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;
    }
    if (!absl::StartsWith(arg, "help")) continue;
    const size_t equals = arg.find('=');
    const absl::string_view name = arg.substr(0, equals);
    const absl::string_view value = equals == absl::string_view::npos
                                        ? absl::string_view()
                                        : arg.substr(equals + 1);
    if (absl::flags_internal::DeduceUsageFlags(name, value)) asked = true;
  }
  return asked;
}

}  // namespace

std::vector<std::string> ParseCommandLine(const char* usage, int argc,
                                          char** argv) {
  absl::FlagsUsageConfig config;
  // --help groups flags by the file that defines them: name each group by
  // what its flags are for, never by the path it was built from.
  config.normalize_filename = [](absl::string_view file) {
    return std::string(FlagGroupName(file));
  };
  // Show our flags, not the ones libraries define.
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  // --version: "<program> <version>", one line, for scripts and bug reports.
  const std::string program = argc > 0 ? Basename(argv[0]) : "strata";
  config.version_string = [program] {
    return absl::StrCat(program, " ", STRATA_VERSION, " (", STRATA_BUILD_TYPE,
                        " build)\n");
  };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
#ifdef NDEBUG
  // Abseil checks every Mutex acquisition for lock-order cycles unless its
  // own library was built with NDEBUG (Debian's is not): bookkeeping on
  // every lock of the data path. Release programs skip it; the tests, which
  // do not come through here, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  if (absl::Status flags = CheckCommandLineFlags(argc, argv); !flags.ok()) {
    std::fprintf(stderr, "%s: %s (see --help)\n",
                 argc > 0 ? Basename(argv[0]) : "strata",
                 std::string(flags.message()).c_str());
    std::exit(kUsageExitCode);
  }
  // --help is a question, not a mistake: its answer goes to stdout with
  // exit 0 (absl's own handling exits 1).
  if (argc > 0 && DeduceHelpRequest(argc, argv)) {
    // What absl's parser would have set first: the heading names the program.
    absl::flags_internal::SetProgramInvocationName(argv[0]);
    const int exit_code = absl::flags_internal::HandleUsageFlags(
        std::cout, absl::ProgramUsageMessage());
    if (exit_code >= 0) {
      std::cout.flush();
      std::exit(0);
    }
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
