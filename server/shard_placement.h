#ifndef STRATA_SERVER_SHARD_PLACEMENT_H_
#define STRATA_SERVER_SHARD_PLACEMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"

namespace strata {

// Which part of the key space a shard's data directory holds: shard
// `shard_index` of `num_shards`, under version `map_version` of the bucket
// layout (version 1: 4096 buckets by hash64(table, key)). Which shard owns
// each bucket, and that map's own version, is the shard map
// (server/shard_map_store.h), kept beside it. Written into
// the data directory (file kShardPlacementFile) when a shard first uses it,
// so that a restart with another --num_shards or --shard_index, which would
// route the directory's rows to other shards and make them unreachable, is
// refused instead.
struct ShardPlacement {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint64_t map_version = 1;

  bool operator==(const ShardPlacement& other) const {
    return shard_index == other.shard_index && num_shards == other.num_shards &&
           map_version == other.map_version;
  }
  // "shard 0 of 2 (bucket map version 1)".
  std::string ToString() const;
};

inline constexpr char kShardPlacementFile[] = "SHARD_PLACEMENT";

// NOT_FOUND when the directory has no placement; DATA_LOSS naming the file
// when it cannot be parsed.
absl::StatusOr<ShardPlacement> ReadShardPlacement(FileSystem& files,
                                                  const std::string& data_dir);
absl::Status WriteShardPlacement(FileSystem& files, const std::string& data_dir,
                                 const ShardPlacement& placement);

// At start: records `wanted` when the directory has no placement yet (a new
// directory, or one from before placements were recorded) and returns OK;
// FAILED_PRECONDITION naming both placements when the recorded one differs.
absl::Status CheckShardPlacement(FileSystem& files, const std::string& data_dir,
                                 const ShardPlacement& wanted);

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_PLACEMENT_H_
