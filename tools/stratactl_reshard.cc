// stratactl reshard-checkpoint: a checkpoint of N shards made into one of M
// shards, offline, from the shards' data directories.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_system.h"
#include "common/status_macros.h"
#include "embedding/checkpoint_reshard.h"
#include "server/shard_map_store.h"
#include "server/shard_placement.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(std::string, from, "",
          "reshard-checkpoint: data directories of the shards that took the "
          "checkpoint, comma-separated, in shard-index order.");
ABSL_FLAG(std::string, to, "",
          "reshard-checkpoint: data directories of the new shards, "
          "comma-separated, in shard-index order; each missing or empty.");
ABSL_FLAG(std::string, new_id, "",
          "reshard-checkpoint: id of the new checkpoint; empty: the same id.");

namespace strata {
namespace tools_internal {
namespace {

std::vector<std::string> SplitDirs(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipWhitespace());
}

// OK when each source directory records the placement its position in
// --from says (or none, from before placements were recorded); true when
// every one records it.
absl::StatusOr<bool> CheckSourcePlacements(
    const std::vector<std::string>& dirs) {
  FileSystem& files = *FileSystem::Default();
  bool all_recorded = true;
  for (size_t s = 0; s < dirs.size(); ++s) {
    absl::StatusOr<ShardPlacement> recorded =
        ReadShardPlacement(files, dirs[s]);
    if (absl::IsNotFound(recorded.status())) {
      all_recorded = false;
      continue;
    }
    if (!recorded.ok()) return recorded.status();
    ShardPlacement given;
    given.shard_index = static_cast<uint32_t>(s);
    given.num_shards = static_cast<uint32_t>(dirs.size());
    if (!(*recorded == given)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--from: ", dirs[s], " holds ", recorded->ToString(),
                       " but is listed as ", given.ToString(),
                       ": list every shard's directory, in shard-index order"));
    }
  }
  return all_recorded;
}

// The shard map the checkpoint was taken under, as its sources recorded it
// beside the checkpoint; nullopt when none did (from before maps were
// recorded: the first map is assumed). INVALID_ARGUMENT when sources
// recorded different maps.
absl::StatusOr<std::optional<ShardMap>> ReadSourceMap(
    const std::vector<std::string>& dirs, const std::string& checkpoint_id) {
  std::optional<ShardMap> found;
  std::string found_in;
  for (const std::string& dir : dirs) {
    absl::StatusOr<ShardMap> map =
        ReadCheckpointShardMap(*FileSystem::Default(), dir, checkpoint_id);
    if (absl::IsNotFound(map.status())) continue;
    if (!map.ok()) return map.status();
    if (found && *found != *map) {
      return absl::InvalidArgumentError(
          absl::StrCat("--from: checkpoint '", checkpoint_id, "' of ", found_in,
                       " was taken under shard map ", found->Summary(),
                       ", but that of ", dir, " under ", map->Summary(),
                       ": list the directories of one cluster's checkpoint"));
    }
    found = *map;
    found_in = dir;
  }
  return found;
}

// Records in each new directory its placement, and beside its checkpoint
// the map the new shards start with (the first map of their count).
absl::Status WriteTargetRecords(const std::vector<std::string>& dirs,
                                const std::string& checkpoint_id) {
  FileSystem& files = *FileSystem::Default();
  const ShardMap first = ShardMap::Modulo(static_cast<uint32_t>(dirs.size()));
  for (size_t t = 0; t < dirs.size(); ++t) {
    ShardPlacement placement;
    placement.shard_index = static_cast<uint32_t>(t);
    placement.num_shards = static_cast<uint32_t>(dirs.size());
    STRATA_RETURN_IF_ERROR(WriteShardPlacement(files, dirs[t], placement));
    STRATA_RETURN_IF_ERROR(
        WriteCheckpointShardMap(files, dirs[t], checkpoint_id, first));
  }
  return absl::OkStatus();
}

void PrintResult(const ReshardCheckpointResult& result, size_t num_sources,
                 bool as_json) {
  if (!as_json) {
    PrintLine(absl::StrCat("resharded checkpoint '", result.checkpoint_id,
                           "' global_step=", result.global_step, " from ",
                           num_sources, " shards (rows ",
                           absl::StrJoin(result.source_rows, ","), ") onto ",
                           result.target_rows.size(), " (rows ",
                           absl::StrJoin(result.target_rows, ","),
                           ") tables=", absl::StrJoin(result.tables, ",")));
    for (size_t s = 0; s < result.skipped_rows.size(); ++s) {
      if (result.skipped_rows[s] == 0) continue;
      PrintLine(absl::StrCat(
          "skipped ", result.skipped_rows[s], " rows of shard ", s,
          " in buckets the checkpoint's shard map gives another shard (a "
          "copy an interrupted bucket move left there)"));
    }
    return;
  }
  JsonWriter json;
  json.BeginObject();
  json.Key("checkpoint_id").String(result.checkpoint_id);
  json.Key("global_step").Uint(result.global_step);
  json.Key("source_rows").BeginArray();
  for (uint64_t rows : result.source_rows) json.Uint(rows);
  json.EndArray();
  json.Key("skipped_rows").BeginArray();
  for (uint64_t rows : result.skipped_rows) json.Uint(rows);
  json.EndArray();
  json.Key("target_rows").BeginArray();
  for (uint64_t rows : result.target_rows) json.Uint(rows);
  json.EndArray();
  json.Key("tables").BeginArray();
  for (const std::string& table : result.tables) json.String(table);
  json.EndArray().EndObject();
  PrintLine(json.text());
}

}  // namespace

int ReshardCheckpointCommand(const CommandContext& context) {
  ReshardCheckpointOptions options;
  options.checkpoint_id = context.args[0];
  options.source_dirs = SplitDirs(absl::GetFlag(FLAGS_from));
  options.target_dirs = SplitDirs(absl::GetFlag(FLAGS_to));
  options.target_checkpoint_id = absl::GetFlag(FLAGS_new_id);
  if (options.source_dirs.empty() || options.target_dirs.empty()) {
    return UsageError(
        "reshard-checkpoint needs --from (the old shards' data directories) "
        "and --to (the new shards'), each in shard-index order");
  }
  absl::StatusOr<bool> placed = CheckSourcePlacements(options.source_dirs);
  if (!placed.ok()) return UsageError(placed.status().message());
  absl::StatusOr<std::optional<ShardMap>> source_map =
      ReadSourceMap(options.source_dirs, options.checkpoint_id);
  if (!source_map.ok()) {
    return absl::IsInvalidArgument(source_map.status())
               ? UsageError(source_map.status().message())
               : ClusterError(source_map.status());
  }
  options.source_map = *source_map;
  // With every source's place known, a row of a bucket its shard does not
  // own is what an interrupted move left on its target: no client reads it.
  options.skip_unowned_rows = *placed && source_map->has_value();
  absl::StatusOr<ReshardCheckpointResult> result = ReshardCheckpoint(options);
  if (absl::IsInvalidArgument(result.status())) {
    return UsageError(result.status().message());
  }
  if (!result.ok()) return ClusterError(result.status());
  if (absl::Status recorded =
          WriteTargetRecords(options.target_dirs, result->checkpoint_id);
      !recorded.ok()) {
    return ClusterError(recorded);
  }
  PrintResult(*result, options.source_dirs.size(), context.json);
  return kExitOk;
}

}  // namespace tools_internal
}  // namespace strata
