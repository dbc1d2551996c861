#ifndef STRATA_SERVING_INTERNAL_STORE_RECORDS_H_
#define STRATA_SERVING_INTERNAL_STORE_RECORDS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "embedding/storage_format.h"
#include "embedding/table_config.h"
#include "serving/serving_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace strata {
namespace serving_internal {

// A shard's stored position and the snapshot epoch its rows carry.
struct StoredShard {
  ShardPosition position;
  uint64_t epoch = 0;
};

// The serving store's bookkeeping records in its "default" column family,
// as read back when it opens.
struct StoreRecords {
  static constexpr char kEpochKey[] = "epoch";
  static std::string TableKey(absl::string_view name);
  static std::string RowCountKey(TableId id);
  static std::string ShardKey(uint32_t shard_index);
  static std::string EncodeShard(const StoredShard& shard);

  std::vector<std::pair<TableId, EmbeddingTableConfig>> tables;
  absl::flat_hash_map<TableId, uint64_t> row_counts;
  absl::flat_hash_map<uint32_t, StoredShard> shards;
  uint64_t last_epoch = 0;
};

// Reads every record of `family`. DATA_LOSS for a malformed one.
absl::StatusOr<StoreRecords> LoadStoreRecords(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family);

// Table records are the training store's (embedding/storage_format.h).
using ::strata::ParseTableRecord;

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_STORE_RECORDS_H_
