#include "common/cluster_flags.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/flag_check.h"
#include "common/logging.h"

ABSL_FLAG(std::string, cluster_file, "",
          "YAML cluster file to take settings from (flags given here "
          "override it); see docs/CLUSTER_FILE.md.");

namespace strata {
namespace {

// The last value of --name in argv ("--name=v", "-name=v" or "--name v"),
// as absl will parse it.
std::optional<std::string> FindFlagValue(int argc, char** argv,
                                         absl::string_view name) {
  std::optional<std::string> value;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    if (arg == name && i + 1 < argc) {
      value = argv[++i];
    } else if (absl::StartsWith(arg, absl::StrCat(name, "="))) {
      value = std::string(arg.substr(name.size() + 1));
    }
  }
  return value;
}

const char* IndexFlag(ClusterRole role) {
  switch (role) {
    case ClusterRole::kShard:
      return "shard_index";
    case ClusterRole::kWorker:
      return "rank";
    case ClusterRole::kServing:
    case ClusterRole::kClient:
      break;
  }
  return nullptr;
}

[[noreturn]] void Fail(const char* program, absl::string_view message) {
  const char* slash = std::strrchr(program, '/');
  std::fprintf(stderr, "%s: %s\n", slash == nullptr ? program : slash + 1,
               std::string(message).c_str());
  std::exit(kUsageExitCode);
}

// The flags of the file, checked against this program's flags.
std::vector<std::string> FlagsFromFile(const char* program,
                                       const std::string& path,
                                       ClusterRole role, int index,
                                       int replica) {
  absl::StatusOr<ClusterFile> cluster = ReadClusterFile(path);
  if (!cluster.ok()) Fail(program, cluster.status().message());
  absl::StatusOr<std::vector<std::string>> flags =
      ClusterFlagsFor(*cluster, role, index, replica);
  if (!flags.ok()) Fail(program, flags.status().message());
  std::vector<char*> check_argv = {const_cast<char*>(program)};
  for (std::string& flag : *flags) check_argv.push_back(flag.data());
  const absl::Status valid = CheckCommandLineFlags(
      static_cast<int>(check_argv.size()), check_argv.data());
  if (!valid.ok()) {
    Fail(program, absl::StrCat("cluster file ", path, ": ", valid.message()));
  }
  return *flags;
}

}  // namespace

std::vector<std::string> ParseCommandLineWithCluster(const char* usage,
                                                     int argc, char** argv,
                                                     ClusterRole role) {
  const std::optional<std::string> path =
      FindFlagValue(argc, argv, "cluster_file");
  if (!path.has_value() || path->empty()) {
    return ParseCommandLine(usage, argc, argv);
  }
  int index = 0;
  if (const char* index_flag = IndexFlag(role); index_flag != nullptr) {
    const std::optional<std::string> text =
        FindFlagValue(argc, argv, index_flag);
    if (text.has_value() && !absl::SimpleAtoi(*text, &index)) {
      Fail(argv[0],
           absl::StrCat("--", index_flag, "='", *text, "' is not an integer"));
    }
  }
  // A replicated shard is one replica of its shard index.
  int replica = 0;
  if (role == ClusterRole::kShard) {
    const std::optional<std::string> text =
        FindFlagValue(argc, argv, "replica_index");
    if (text.has_value() && !absl::SimpleAtoi(*text, &replica)) {
      Fail(argv[0],
           absl::StrCat("--replica_index='", *text, "' is not an integer"));
    }
  }
  std::vector<std::string> from_file =
      FlagsFromFile(argv[0], *path, role, index, replica);
  // Daemons log where their settings came from; a command-line tool's
  // output stays its own.
  if (role != ClusterRole::kClient) {
    STRATA_LOG(INFO, "config") << "flags from cluster file " << *path << ": "
                               << absl::StrJoin(from_file, " ");
  }
  // The file's flags first: absl keeps the last value of a repeated flag, so
  // the command line overrides the file.
  std::vector<char*> merged = {argv[0]};
  for (std::string& flag : from_file) merged.push_back(flag.data());
  for (int i = 1; i < argc; ++i) merged.push_back(argv[i]);
  return ParseCommandLine(usage, static_cast<int>(merged.size()),
                          merged.data());
}

}  // namespace strata
