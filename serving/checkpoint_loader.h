#ifndef STRATA_SERVING_CHECKPOINT_LOADER_H_
#define STRATA_SERVING_CHECKPOINT_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "serving/serving_store.h"

namespace strata {

struct CheckpointLoadResult {
  uint64_t tables = 0;
  uint64_t rows = 0;
};

// Copies the values of one training shard's checkpoint into `store` as the
// rows of shard `shard_index`, replacing what the store held from that
// shard. `checkpoint_dir` is <training data_dir>/checkpoints/<id>: a RocksDB
// database (opened read-only) whose "default" column family maps
// "table/<name>" to "<id> <config>" and whose "values" column family maps
// the big-endian table id and feature id to dim float32. Optimizer state is
// not read. `tables` limits the copy; empty copies every table.
// NOT_FOUND when the directory holds no database, DATA_LOSS for a malformed
// one.
absl::StatusOr<CheckpointLoadResult> LoadCheckpoint(
    const std::string& checkpoint_dir, uint32_t shard_index,
    const std::vector<std::string>& tables, ServingStore& store);

}  // namespace strata

#endif  // STRATA_SERVING_CHECKPOINT_LOADER_H_
