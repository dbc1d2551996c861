#ifndef STRATA_TOOLS_STRATACTL_COMMANDS_H_
#define STRATA_TOOLS_STRATACTL_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/ps_client.h"
#include "proto/strata.pb.h"

namespace strata {
namespace tools_internal {

// Exit codes of stratactl.
inline constexpr int kExitOk = 0;
inline constexpr int kExitClusterError = 1;
inline constexpr int kExitUsage = 2;

// What every stratactl command gets. The client is owned by main().
struct CommandContext {
  PsClient* client = nullptr;
  // The options `client` was made with (health makes one client per shard).
  PsClientOptions client_options;
  // Positional arguments after the command name.
  std::vector<std::string> args;
  // --json: one JSON document on stdout instead of text.
  bool json = false;
};

// The address of shard `shard`: from --shards, else from the shard map
// (a shard added since).
std::string ShardAddress(const CommandContext& context, size_t shard);
// Print "stratactl: <message>" on stderr and return the exit code.
int UsageError(absl::string_view message);
// "stratactl: <CODE>: <message>", e.g. "stratactl: NOT_FOUND: ...".
int ClusterError(const absl::Status& status);
// Writes `text` and a newline to stdout.
void PrintLine(absl::string_view text);
// "512 B", "1.5 MiB", ...
std::string HumanBytes(uint64_t bytes);

// Each returns the process exit code, having printed its result or error.
int CreateTableCommand(const CommandContext& context);
int TablesCommand(const CommandContext& context);
int StatsCommand(const CommandContext& context);
// The newest shard map the shards serve: its version, each shard's buckets
// and the version each shard serves.
int ShardMapCommand(const CommandContext& context);
// Moves buckets to another shard while the cluster runs (online).
int MoveBucketsCommand(const CommandContext& context);
// Grows or shrinks the cluster online to the shards of --to_shards, moving
// buckets so that each shard owns an even share.
int ReshardCommand(const CommandContext& context);
int CheckpointCommand(const CommandContext& context);
int RestoreCommand(const CommandContext& context);
int HealthCommand(const CommandContext& context);
int PullCommand(const CommandContext& context);
int PushCommand(const CommandContext& context);
// Every shard's state and rates (and the serving PS's lag with --serving);
// exit 1 when a shard or the serving PS is down.
int StatusCommand(const CommandContext& context);
// These need no cluster: context.client is null.
int FeatureKeyCommand(const CommandContext& context);
// Offline: reads and writes shards' data directories.
int ReshardCheckpointCommand(const CommandContext& context);

}  // namespace tools_internal
}  // namespace strata

#endif  // STRATA_TOOLS_STRATACTL_COMMANDS_H_
