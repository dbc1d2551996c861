#ifndef STRATA_SERVING_INTERNAL_ROCKSDB_SERVING_STORE_H_
#define STRATA_SERVING_INTERNAL_ROCKSDB_SERVING_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "embedding/initializer.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "serving/internal/row_cache.h"
#include "serving/internal/store_records.h"
#include "serving/serving_store.h"

namespace strata {
namespace serving_internal {

// An immutable table of the store; replaced, not changed, when its config
// changes, so that a lookup can go on with the one it found.
struct TableEntry {
  TableEntry(const EmbeddingTableConfig& c, TableId i)
      : config(c), id(i), initializer(c.initializer, c.seed) {}
  EmbeddingTableConfig config;
  TableId id;
  Initializer initializer;
};

// ServingStore on RocksDB (serving/rocksdb_serving_store.cc: opening and
// writes; rocksdb_serving_store_reads.cc: reads). Thread-safe: writes are
// serialized by write_mu_; lookups hold mu_ only to find their table, then
// read through the row cache's stripe locks and RocksDB.
class RocksDbServingStore final : public ServingStore {
 public:
  explicit RocksDbServingStore(const ServingStoreOptions& options)
      : options_(options), cache_(options.cache_rows) {}
  ~RocksDbServingStore() override {
    for (auto* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
  }

  absl::Status Init();

  absl::Status Apply(const ShardUpdate& update) override;
  absl::Status BeginSnapshot(uint32_t shard_index) override;
  absl::Status EndSnapshot(uint32_t shard_index,
                           const ShardPosition& position) override;
  void CancelSnapshot(uint32_t shard_index) override {
    absl::MutexLock lock(&mu_);
    snapshot_epochs_.erase(shard_index);
  }
  ShardPosition Position(uint32_t shard_index) override;
  std::vector<ServingTableStats> ListTables() override;
  RowCacheStats CacheStats() override { return cache_.Stats(); }
  absl::StatusOr<EmbeddingTableConfig> GetTableConfig(
      absl::string_view table) override;
  absl::StatusOr<size_t> Lookup(absl::string_view table,
                                absl::Span<const FeatureId> keys,
                                absl::Span<float> out) override;

 private:
  using Entry = std::shared_ptr<const TableEntry>;

  Entry FindTable(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  // Adds the tables of `update` to `batch` and returns the entries the rows
  // are written under, by name. A table whose dimension changed loses its
  // rows now, in a write of its own.
  absl::StatusOr<absl::flat_hash_map<std::string, Entry>> PrepareTables(
      const ShardUpdate& update, rocksdb::WriteBatch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status DropRows(const TableEntry& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Adds the deletions of `update` to `batch`, to `writes` (with no values:
  // the cache forgets the rows) and to `delta`; `added` holds the rows the
  // update writes that are new.
  absl::Status AddDeletes(const ShardUpdate& update,
                          const absl::flat_hash_set<RowId>& added,
                          rocksdb::WriteBatch& batch,
                          std::vector<CachedWrite>& writes,
                          absl::flat_hash_map<TableId, int64_t>& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Adds the row counts changed by `delta` to `batch`.
  void PutCounts(const absl::flat_hash_map<TableId, int64_t>& delta,
                 rocksdb::WriteBatch& batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes `batch`, whose row changes are `writes`, keeping the cache
  // consistent, then adds `delta` to the row counts.
  absl::Status Commit(rocksdb::WriteBatch& batch,
                      absl::Span<const CachedWrite> writes,
                      const absl::flat_hash_map<TableId, int64_t>& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status Write(rocksdb::WriteBatch& batch);

  rocksdb::ColumnFamilyHandle* meta() const { return handles_[0]; }
  rocksdb::ColumnFamilyHandle* values() const { return handles_[1]; }

  const ServingStoreOptions options_;
  RowCache cache_;
  // Set by Init, then constant.
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;

  // Serializes writers. Taken before mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t last_epoch_ ABSL_GUARDED_BY(write_mu_) = 0;
  TableId next_table_id_ ABSL_GUARDED_BY(write_mu_) = 1;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> tables_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TableId, uint64_t> row_counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, StoredShard> shards_ ABSL_GUARDED_BY(mu_);
  // Shards in a snapshot, with the epoch their rows are written in.
  absl::flat_hash_map<uint32_t, uint64_t> snapshot_epochs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_ROCKSDB_SERVING_STORE_H_
