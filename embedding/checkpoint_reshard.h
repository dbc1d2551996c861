#ifndef STRATA_EMBEDDING_CHECKPOINT_RESHARD_H_
#define STRATA_EMBEDDING_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "common/shard_map.h"

namespace strata {

struct ReshardCheckpointOptions {
  // Data directories of the shards that took the checkpoint, in shard-index
  // order (N of them; one replica's directory per shard).
  std::vector<std::string> source_dirs;
  // The checkpoint to reshard (full or incremental: its chain is applied).
  std::string checkpoint_id;
  // The shard map the checkpoint was taken under (N shards). Default:
  // ShardMap::Modulo(N), the map a cluster starts with.
  std::optional<ShardMap> source_map;
  // Data directories of the new shards, in shard-index order (M of them).
  // Each must be missing or empty.
  std::vector<std::string> target_dirs;
  // The id the new checkpoint gets; empty: checkpoint_id.
  std::string target_checkpoint_id;
  // Rows a source holds of buckets that source_map gives another source are
  // skipped (and counted) instead of refused. Such rows are a partial copy
  // an interrupted bucket move left on its target, never read by clients.
  // Set it only when the sources' order is known otherwise (each records
  // its placement): a refused row is how directories listed out of order
  // show.
  bool skip_unowned_rows = false;
  FileSystem* file_system = nullptr;  // default: FileSystem::Default()
};

struct ReshardCheckpointResult {
  std::string checkpoint_id;
  uint64_t global_step = 0;  // the largest of the sources'
  std::vector<uint64_t> source_global_steps;
  std::vector<uint64_t> source_rows;  // per source shard
  // Per source shard: rows of buckets it did not own, skipped
  // (skip_unowned_rows).
  std::vector<uint64_t> skipped_rows;
  std::vector<uint64_t> target_rows;  // per new shard
  std::vector<std::string> tables;    // sorted
};

// Restores a checkpoint taken on N shards onto M shards, offline (the
// shards need not run): reads each source shard's checkpoint (for an
// incremental one, its full checkpoint with every delta applied), sends
// every row (value and optimizer state) to the new shard that owns its
// bucket under the first map of M shards (bucket mod M), and writes into each
// target directory a full checkpoint `target_checkpoint_id` of its rows and
// every table, and a live database equal to it, so that a shard started there
// serves the checkpoint at once (and can restore it again later).
// Push deduplication windows are not carried: they belong to the writers of
// the old cluster, which resume from the checkpoint as new writers.
//
// Errors (nothing is left in the target directories then):
// INVALID_ARGUMENT for bad options or a non-empty target directory;
// NOT_FOUND when a source lacks the checkpoint or a link of its chain;
// FAILED_PRECONDITION when sources define a table differently or a source
// holds a row another source index owns (the directories are out of order
// or belong to another cluster) and skip_unowned_rows is not set; DATA_LOSS
// for a damaged checkpoint.
absl::StatusOr<ReshardCheckpointResult> ReshardCheckpoint(
    const ReshardCheckpointOptions& options);

}  // namespace strata

#endif  // STRATA_EMBEDDING_CHECKPOINT_RESHARD_H_
