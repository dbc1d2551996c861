#ifndef STRATA_SERVER_SHARD_MAP_STORE_H_
#define STRATA_SERVER_SHARD_MAP_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "common/shard_map.h"

namespace strata {

class EtcdClient;

// Where a shard keeps the cluster's shard map: in its data directory (file
// kShardMapFile) for a cluster of static shards, or in etcd (key
// "/<cluster>/shard_map", one for every shard) for a cluster coordinated
// through it. Thread-compatible.
class ShardMapStore {
 public:
  virtual ~ShardMapStore() = default;

  // The stored map; when none is stored yet, ShardMap::Modulo(num_shards),
  // stored now. FAILED_PRECONDITION naming both counts when the stored map
  // has another number of shards (the shard was started with a
  // --num_shards its data disagrees with).
  absl::StatusOr<ShardMap> LoadOrCreate(uint32_t num_shards);
  // The stored map; NOT_FOUND when there is none.
  virtual absl::StatusOr<ShardMap> Read() = 0;
  // Stores `next` in place of `current`; FAILED_PRECONDITION when the
  // stored map is no longer `current` (another shard or tool changed it).
  virtual absl::Status Replace(const ShardMap& current,
                               const ShardMap& next) = 0;
  // Names the place, for messages: "/data/shard0/SHARD_MAP".
  virtual std::string Where() const = 0;

 protected:
  // Stores `map` unless a map is stored already (then OK, unchanged).
  virtual absl::Status CreateIfAbsent(const ShardMap& map) = 0;
};

inline constexpr char kShardMapFile[] = "SHARD_MAP";

// `files` must outlive the store.
std::unique_ptr<ShardMapStore> CreateFileShardMapStore(FileSystem* files,
                                                       std::string data_dir);
// `etcd` must outlive the store.
std::unique_ptr<ShardMapStore> CreateEtcdShardMapStore(EtcdClient* etcd,
                                                       std::string cluster);

// The shard map a checkpoint was taken under, kept in its directory
// (<data_dir>/checkpoints/<id>/SHARD_MAP), so that it is restored and
// resharded by the map its rows were placed by. Read: NOT_FOUND for a
// checkpoint from before maps were recorded, DATA_LOSS naming the file for a
// damaged one.
absl::Status WriteCheckpointShardMap(FileSystem& files,
                                     const std::string& data_dir,
                                     const std::string& checkpoint_id,
                                     const ShardMap& map);
absl::StatusOr<ShardMap> ReadCheckpointShardMap(
    FileSystem& files, const std::string& data_dir,
    const std::string& checkpoint_id);

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_MAP_STORE_H_
