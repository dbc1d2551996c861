// stratactl: admin CLI of a Strata cluster (tables, stats, health,
// checkpoint/restore, lookups and pushes), with --json output for scripts.

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/client_flags.h"
#include "common/cluster_flags.h"
#include "common/command_line.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(std::string, shards, "",
          "Comma-separated host:port of every shard, in shard-index order "
          "(required).");
ABSL_FLAG(bool, json, false,
          "Print one JSON document on stdout instead of text. Errors still go "
          "to stderr, with the same exit codes.");
ABSL_FLAG(int64_t, timeout_ms, 10000, "Deadline of each call to a shard.");
ABSL_FLAG(int64_t, retry_deadline_ms, 5000,
          "How long a call keeps retrying shards that answer UNAVAILABLE "
          "(restarting, overloaded or not up yet); 0 tries once.");
ABSL_FLAG(std::string, encoding, "float32",
          "Value encoding on the wire for pull and push: float32 or float16.");

namespace strata {
namespace tools_internal {
namespace {

constexpr char kUsage[] =
    "Admin CLI of a Strata parameter-server cluster.\n"
    "Usage: stratactl --shards=host:port[,host:port...] [--json] <command> "
    "[args]\n"
    "Commands:\n"
    "  create-table NAME --dim=N [--optimizer=sgd|adagrad|adam|ftrl\n"
    "      --learning_rate=R --initializer=zeros|constant|uniform|"
    "truncated_normal\n"
    "      --init_value=V --init_min=A --init_max=B --init_stddev=S "
    "--seed=N\n"
    "      --admit_min_count=N --admit_probability=P --evict_after_steps=N\n"
    "      --evict_after_seconds=N --evict_min_norm=X ...]\n"
    "  tables                     name, dim, optimizer, rows, memory,\n"
    "                             admitted, rejected, evicted keys\n"
    "  stats                      per-shard counters, tables, checkpoints\n"
    "  pull TABLE KEY[,KEY...]    one row per key (or --keys=1,2,3)\n"
    "  push TABLE --keys=K,.. --gradients=G,..   keys*dim gradients, or\n"
    "  push TABLE --file=PATH     lines \"key g1 g2 ... gdim\"\n"
    "  checkpoint [ID] [--global_step=N] [--incremental]   (no ID:\n"
    "                             \"step-<N>\"); --incremental: only rows\n"
    "                             changed since each shard's last one\n"
    "  restore ID                 (of an incremental one: its whole chain)\n"
    "  move-buckets [B|B1-B2 ..] --to_shard=S [--from_shard=S --count=N]\n"
    "                             online: moves buckets (rows, optimizer\n"
    "                             state) to shard S while training runs,\n"
    "                             --buckets_per_step at a time (one short\n"
    "                             write pause each), --max_rows_per_second\n"
    "  reshard --to_shards=H:P,..  online: grows (new shards started with\n"
    "                             the new --num_shards) or shrinks (from\n"
    "                             the end) the cluster, buckets spread evenly\n"
    "  reshard-checkpoint ID --from=DIR,.. --to=DIR,.. [--new_id=ID]\n"
    "                             offline, no --shards: the checkpoint of\n"
    "                             the shards whose data directories are\n"
    "                             --from, split or merged onto new shards\n"
    "                             in the --to directories (rows by bucket)\n"
    "  health                     exit 0 when every shard is SERVING\n"
    "  status [--serving=H:P] [--interval_s=S]   shards up, rows, memory,\n"
    "                             requests/s; the serving PS's lag\n"
    "  feature-key FIELD VALUE..  PS keys of Criteo values of C<FIELD>\n"
    "  plot RUN -o PNG            loss and AUC against steps of a\n"
    "                             worker's --progress_file (or a run\n"
    "                             folder); no --shards; needs matplotlib\n"
    "                             (8 hex digits, - for empty; no --shards)\n"
    "Exit status: 0 success, 1 error from the cluster, 2 usage error.\n"
    "Example: stratactl --shards=127.0.0.1:50051 pull users 1,2,3";

struct Command {
  const char* name;
  int (*run)(const CommandContext&);
  size_t min_args;
  size_t max_args;
  const char* synopsis;
  bool needs_cluster = true;
};

constexpr size_t kAny = ~size_t{0};

constexpr Command kCommands[] = {
    {"create-table", CreateTableCommand, 1, 1, "create-table NAME --dim=N"},
    {"tables", TablesCommand, 0, 0, "tables"},
    {"stats", StatsCommand, 0, 0, "stats"},
    {"shard-map", ShardMapCommand, 0, 0, "shard-map"},
    {"pull", PullCommand, 1, kAny, "pull TABLE KEY[,KEY...]"},
    {"push", PushCommand, 1, kAny,
     "push TABLE --keys=.. --gradients=.. | --file=PATH"},
    {"checkpoint", CheckpointCommand, 0, 1, "checkpoint [ID]"},
    {"restore", RestoreCommand, 1, 1, "restore ID"},
    {"health", HealthCommand, 0, 0, "health"},
    {"status", StatusCommand, 0, 0, "status [--serving=H:P]"},
    {"move-buckets", MoveBucketsCommand, 0, kAny,
     "move-buckets [B|B1-B2 ...] --to_shard=S [--from_shard=S --count=N]"},
    {"reshard", ReshardCommand, 0, 0, "reshard --to_shards=H:P,H:P,..."},
    {"reshard-checkpoint", ReshardCheckpointCommand, 1, 1,
     "reshard-checkpoint ID --from=DIR,DIR.. --to=DIR,DIR.. [--new_id=ID]",
     false},
    {"feature-key", FeatureKeyCommand, 2, kAny, "feature-key FIELD VALUE...",
     false},
};

absl::StatusOr<std::vector<std::string>> ParseShards(absl::string_view text) {
  std::vector<std::string> shards =
      absl::StrSplit(text, ',', absl::SkipWhitespace());
  if (shards.empty()) {
    return absl::InvalidArgumentError(
        "--shards is required (host:port of every shard, comma-separated)");
  }
  for (const std::string& shard : shards) {
    if (shard.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shards: '", shard, "' is not host:port"));
    }
  }
  return shards;
}

absl::StatusOr<PsClientOptions> ClientOptionsFromFlags() {
  PsClientOptions options;
  absl::StatusOr<std::vector<std::string>> shards =
      ParseShards(absl::GetFlag(FLAGS_shards));
  if (!shards.ok()) return shards.status();
  options.shard_addresses = *std::move(shards);
  const int64_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  const int64_t retry_ms = absl::GetFlag(FLAGS_retry_deadline_ms);
  if (timeout_ms <= 0) {
    return absl::InvalidArgumentError("--timeout_ms must be > 0");
  }
  if (retry_ms < 0) {
    return absl::InvalidArgumentError("--retry_deadline_ms must be >= 0");
  }
  options.rpc_timeout = absl::Milliseconds(timeout_ms);
  options.retry_deadline = absl::Milliseconds(retry_ms);
  const std::string encoding = absl::GetFlag(FLAGS_encoding);
  if (encoding == "float32") {
    options.encoding = WireEncoding::kFloat32;
  } else if (encoding == "float16") {
    options.encoding = WireEncoding::kFloat16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--encoding must be float32 or float16, not '", encoding, "'"));
  }
  absl::StatusOr<ClientSecurity> security = ClientSecurityFromFlags();
  if (!security.ok()) return security.status();
  options.tls_ca_file = security->tls_ca_file;
  options.tls_client_cert_file = security->tls_client_cert_file;
  options.tls_client_key_file = security->tls_client_key_file;
  options.auth_token = security->auth_token;
  return options;
}

// Where the command's name is: the first argument that names a command,
// or 0 when none does.
int FindCommand(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return 0;
    if (arg == "plot") return i;  // Run() hands it to strata-plot.
    for (const Command& command : kCommands) {
      if (arg == command.name) return i;
    }
  }
  return 0;
}

// The lines of kUsage that describe `name`: its own line and the more
// indented ones under it.
std::string CommandHelp(absl::string_view name) {
  std::string out;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(kUsage, '\n')) {
    if (absl::StartsWith(line, "  ") && !absl::StartsWith(line, "   ")) {
      inside = absl::StartsWith(line.substr(2), absl::StrCat(name, " ")) ||
               line.substr(2) == name;
    } else if (!absl::StartsWith(line, "   ")) {
      inside = false;
    }
    if (inside) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

bool IsHelpFlag(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "--helpfull" ||
         arg == "-h";
}

// `stratactl plot ...`: strata-plot (a Python program with matplotlib,
// installed next to stratactl) with the same arguments, so that its own
// options (-o FILE) are not taken for stratactl's flags.
int ExecPlot(int argc, char** argv, int command_at) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = std::string(self);
    dir = dir.substr(0, dir.rfind('/'));
  }
  const std::string plot = dir + "/strata-plot";
  std::vector<char*> args = {const_cast<char*>(plot.c_str())};
  for (int i = command_at + 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(plot.c_str(), args.data());
  return UsageError(
      absl::StrCat("plot needs ", plot, ": ", std::strerror(errno)));
}

int Run(int argc, char** argv) {
  const int command_at = FindCommand(argc, argv);
  if (command_at > 0 && absl::string_view(argv[command_at]) == "plot") {
    return ExecPlot(argc, argv, command_at);
  }
  const std::string name_given = command_at > 0 ? argv[command_at] : "";
  for (int i = command_at + 1; command_at > 0 && i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    // `stratactl pull TABLE --help`: that command's help, not everything.
    if (IsHelpFlag(arg)) {
      const std::string help = CommandHelp(name_given);
      std::printf(
          "usage: stratactl [--shards=H:P,... | --cluster_file=F] [--json] "
          "%s\n%s(flags of every command: stratactl --help)\n",
          name_given.c_str(), help.c_str());
      return 0;
    }
    // A negative number would be taken for a flag ("-1": unknown flag
    // --1); say what is wrong with it instead.
    if (arg.size() > 1 && arg[0] == '-' && absl::ascii_isdigit(arg[1])) {
      return UsageError(absl::StrCat(
          "'", arg, "' is not a valid argument of ", name_given,
          ": keys and ids are unsigned integers (an argument that starts "
          "with '-' goes after '--')"));
    }
  }
  std::vector<std::string> positional =
      ParseCommandLineWithCluster(kUsage, argc, argv, ClusterRole::kClient);
  if (positional.size() < 2) {
    return UsageError("no command given (see --help)");
  }
  const std::string& name = positional[1];
  const Command* command = nullptr;
  for (const Command& candidate : kCommands) {
    if (name == candidate.name) command = &candidate;
  }
  if (command == nullptr) {
    return UsageError(
        absl::StrCat("unknown command '", name, "' (see --help)"));
  }
  CommandContext context;
  context.args.assign(positional.begin() + 2, positional.end());
  for (const std::string& arg : context.args) {
    // Table names and checkpoint ids travel as protobuf strings.
    if (!IsValidUtf8(arg)) {
      return UsageError("arguments must be valid UTF-8");
    }
  }
  context.json = absl::GetFlag(FLAGS_json);
  if (context.args.size() < command->min_args ||
      context.args.size() > command->max_args) {
    return UsageError(absl::StrCat("usage: stratactl ", command->synopsis));
  }
  if (!command->needs_cluster) return command->run(context);
  absl::StatusOr<PsClientOptions> options = ClientOptionsFromFlags();
  if (!options.ok()) return UsageError(options.status().message());
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(*options);
  if (!client.ok()) return UsageError(client.status().message());
  context.client = client->get();
  context.client_options = *std::move(options);
  return command->run(context);
}

}  // namespace

std::string ShardAddress(const CommandContext& context, size_t shard) {
  const std::vector<std::string>& given =
      context.client_options.shard_addresses;
  if (shard < given.size()) return given[shard];
  if (context.client != nullptr) {
    const std::vector<std::string>& known =
        context.client->shard_map()->addresses();
    if (shard < known.size()) return known[shard];
  }
  return absl::StrCat("shard ", shard);
}

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "stratactl: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return kExitUsage;
}

int ClusterError(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  std::fprintf(stderr, "stratactl: %s: %.*s\n", code.c_str(),
               static_cast<int>(status.message().size()),
               status.message().data());
  return kExitClusterError;
}

void PrintLine(absl::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace tools_internal
}  // namespace strata

int main(int argc, char** argv) {
  return strata::tools_internal::Run(argc, argv);
}
