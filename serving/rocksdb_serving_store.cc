// ServingStore on RocksDB. The "default" column family holds
//   table/<name>   "<id> <config>" (the training store's format)
//   rows/<id>      the table's row count
//   shard/<index>  "<incarnation> <sequence> <acknowledged_micros> <epoch>"
//   epoch          the last snapshot epoch handed out
// and "values" holds the rows (serving_internal/row_format.h). A shard's
// position is written in the same WriteBatch as the rows it covers, and
// RocksDB recovers a prefix of the writes after a crash, so the rows and the
// position always agree.

#include "serving/internal/rocksdb_serving_store.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "embedding/rocksdb_logger.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "serving/internal/row_format.h"

namespace strata {
namespace serving_internal {
namespace {

// Rows deleted per write when a snapshot's end sweeps stale rows.
constexpr size_t kSweepBatchRows = 4096;

}  // namespace

absl::Status RocksDbServingStore::Init() {
  if (options_.rocksdb_env == nullptr) {
    STRATA_RETURN_IF_ERROR(
        FileSystem::Default()->CreateDirs(options_.data_dir));
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  db_options.info_log = RocksDbLogger();
  if (options_.rocksdb_env != nullptr) db_options.env = options_.rocksdb_env;
  // Lookups are point reads, many of keys without a row: bloom filters let
  // those skip the data blocks.
  rocksdb::BlockBasedTableOptions table_options;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  db_options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  db_options.write_buffer_size = options_.write_buffer_bytes;
  // Rows are trained float32 values whose mantissas are close to random:
  // Snappy saves little on them (as on the training shard's) and cost every
  // flush and compaction a pass over each block (4% of a follower's CPU
  // under a heavy push load).
  db_options.compression = rocksdb::kNoCompression;
  const rocksdb::ColumnFamilyOptions family_options(db_options);
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, family_options},
      {"values", family_options}};
  rocksdb::DB* db = nullptr;
  const std::string path = options_.data_dir + "/db";
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, path, families, &handles_, &db);
  if (!s.ok()) {
    if (s.IsCorruption()) {
      return absl::DataLossError(absl::StrCat("serving store in ", path,
                                              " is corrupt: ", s.ToString()));
    }
    return absl::InternalError(absl::StrCat("cannot open serving store in ",
                                            path, ": ", s.ToString()));
  }
  db_.reset(db);

  STRATA_ASSIGN_OR_RETURN(StoreRecords records,
                          serving_internal::LoadStoreRecords(*db_, meta()));
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  last_epoch_ = records.last_epoch;
  for (const auto& [id, config] : records.tables) {
    tables_[config.name] = std::make_shared<TableEntry>(config, id);
    next_table_id_ = std::max(next_table_id_, id + 1);
  }
  row_counts_ = std::move(records.row_counts);
  shards_ = std::move(records.shards);
  STRATA_LOG(INFO, "store")
      << "opened " << path << ": " << tables_.size() << " tables, "
      << shards_.size() << " shard positions";
  return absl::OkStatus();
}

absl::Status RocksDbServingStore::Write(rocksdb::WriteBatch& batch) {
  // Not synced: the write-ahead log survives kill -9 of the process. A power
  // loss may drop the last writes, rows and positions together, and the
  // followers then fetch those updates again.
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("serving store write failed: ", s.ToString()));
  }
  return absl::OkStatus();
}

RocksDbServingStore::Entry RocksDbServingStore::FindTable(
    absl::string_view name) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = tables_.find(name);
  return it == tables_.end() ? nullptr : it->second;
}

absl::StatusOr<absl::flat_hash_map<std::string, RocksDbServingStore::Entry>>
RocksDbServingStore::PrepareTables(const ShardUpdate& update,
                                   rocksdb::WriteBatch& batch) {
  absl::flat_hash_map<std::string, Entry> entries;
  for (const EmbeddingTableConfig& config : update.tables) {
    STRATA_RETURN_IF_ERROR(ValidateTableConfig(config));
    Entry existing = FindTable(config.name);
    if (existing != nullptr && SameTableConfig(existing->config, config)) {
      entries[config.name] = existing;
      continue;
    }
    TableId id = next_table_id_;
    if (existing != nullptr) {
      id = existing->id;
      if (existing->config.dim != config.dim) {
        STRATA_RETURN_IF_ERROR(DropRows(*existing));
      }
    } else {
      ++next_table_id_;
    }
    batch.Put(meta(), StoreRecords::TableKey(config.name),
              absl::StrCat(id, " ", SerializeTableConfig(config)));
    entries[config.name] = std::make_shared<TableEntry>(config, id);
  }
  for (const RowBatch& rows : update.rows) {
    if (entries.contains(rows.table)) continue;
    Entry entry = FindTable(rows.table);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows of unknown table '", rows.table, "'"));
    }
    entries[std::string(rows.table)] = std::move(entry);
  }
  return entries;
}

absl::Status RocksDbServingStore::DropRows(const TableEntry& table) {
  rocksdb::WriteBatch batch;
  batch.DeleteRange(values(), RowKey(table.id, 0), RowKey(table.id + 1, 0));
  batch.Put(meta(), StoreRecords::RowCountKey(table.id), "0");
  cache_.BeginClear();
  absl::Status written = Write(batch);
  cache_.EndClear();
  STRATA_RETURN_IF_ERROR(written);
  absl::MutexLock lock(&mu_);
  row_counts_[table.id] = 0;
  STRATA_LOG(WARNING, "store") << "table '" << table.config.name
                               << "' changed its dimension: rows dropped";
  return absl::OkStatus();
}

void RocksDbServingStore::PutCounts(
    const absl::flat_hash_map<TableId, int64_t>& delta,
    rocksdb::WriteBatch& batch) {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [id, change] : delta) {
    auto it = row_counts_.find(id);
    const uint64_t count = (it == row_counts_.end() ? 0 : it->second) + change;
    batch.Put(meta(), StoreRecords::RowCountKey(id), absl::StrCat(count));
  }
}

absl::Status RocksDbServingStore::Commit(
    rocksdb::WriteBatch& batch, absl::Span<const CachedWrite> writes,
    const absl::flat_hash_map<TableId, int64_t>& delta) {
  PutCounts(delta, batch);
  std::vector<bool> was_cached;
  cache_.BeginWrite(writes, was_cached);
  absl::Status written = Write(batch);
  cache_.EndWrite(writes, was_cached);
  STRATA_RETURN_IF_ERROR(written);
  absl::MutexLock lock(&mu_);
  for (const auto& [id, change] : delta) row_counts_[id] += change;
  return absl::OkStatus();
}

absl::Status RocksDbServingStore::Apply(const ShardUpdate& update) {
  absl::MutexLock write_lock(&write_mu_);
  uint64_t epoch = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto snapshot = snapshot_epochs_.find(update.shard_index);
    if (snapshot != snapshot_epochs_.end()) {
      if (update.position.has_value()) {
        return absl::FailedPreconditionError(
            "a shard's position cannot advance during its snapshot");
      }
      epoch = snapshot->second;
    } else if (auto it = shards_.find(update.shard_index);
               it != shards_.end()) {
      epoch = it->second.epoch;
    }
  }
  rocksdb::WriteBatch batch;
  STRATA_ASSIGN_OR_RETURN(auto entries, PrepareTables(update, batch));

  std::vector<CachedWrite> writes;
  std::vector<std::string> keys;
  for (const RowBatch& rows : update.rows) {
    const TableEntry& table = *entries[rows.table];
    const size_t dim = table.config.dim;
    if (rows.values.size() != rows.keys.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", rows.table, "': ", rows.values.size(), " values for ",
          rows.keys.size(), " keys of dimension ", dim));
    }
    for (size_t i = 0; i < rows.keys.size(); ++i) {
      writes.push_back(
          {RowId{table.id, rows.keys[i]}, rows.values.subspan(i * dim, dim)});
      keys.push_back(RowKey(table.id, rows.keys[i]));
    }
  }
  // Which rows are new, for the row counts. A cached row exists (the cache
  // holds no row RocksDB lacks, and write_mu_ keeps other writers out), so
  // only the others are read: an update of cached rows makes no point
  // reads.
  std::vector<bool> cached;
  cache_.Contains(writes, cached);
  std::vector<rocksdb::Slice> slices;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (!cached[i]) slices.emplace_back(keys[i]);
  }
  std::vector<rocksdb::PinnableSlice> found(slices.size());
  std::vector<rocksdb::Status> statuses(slices.size());
  if (!slices.empty()) {
    db_->MultiGet(rocksdb::ReadOptions(), values(), slices.size(),
                  slices.data(), found.data(), statuses.data());
  }
  absl::flat_hash_map<TableId, int64_t> delta;
  absl::flat_hash_set<RowId> added;
  std::string value;
  size_t read = 0;  // Index into statuses of the next row not cached.
  for (size_t i = 0; i < writes.size(); ++i) {
    const rocksdb::Status* status = cached[i] ? nullptr : &statuses[read++];
    if (status != nullptr && status->IsNotFound()) {
      if (added.insert(writes[i].id).second) ++delta[writes[i].id.table];
    } else if (status != nullptr && !status->ok()) {
      return absl::InternalError(
          absl::StrCat("serving store read failed: ", status->ToString()));
    }
    value.assign(reinterpret_cast<const char*>(writes[i].values.data()),
                 writes[i].values.size() * sizeof(float));
    AppendStamp(update.shard_index, epoch, &value);
    batch.Put(values(), keys[i], value);
  }
  STRATA_RETURN_IF_ERROR(AddDeletes(update, added, batch, writes, delta));
  if (update.position.has_value()) {
    batch.Put(meta(), StoreRecords::ShardKey(update.shard_index),
              StoreRecords::EncodeShard({*update.position, epoch}));
  }
  STRATA_RETURN_IF_ERROR(Commit(batch, writes, delta));

  absl::MutexLock lock(&mu_);
  for (const EmbeddingTableConfig& config : update.tables) {
    tables_[config.name] = entries[config.name];
  }
  if (update.position.has_value()) {
    shards_[update.shard_index] = {*update.position, epoch};
  }
  return absl::OkStatus();
}

absl::Status RocksDbServingStore::AddDeletes(
    const ShardUpdate& update, const absl::flat_hash_set<RowId>& added,
    rocksdb::WriteBatch& batch, std::vector<CachedWrite>& writes,
    absl::flat_hash_map<TableId, int64_t>& delta) {
  std::vector<RowId> ids;
  std::vector<std::string> keys;
  for (const DeletedKeys& deleted : update.deleted) {
    // A table this store never heard of has no rows to forget.
    Entry table = FindTable(deleted.table);
    if (table == nullptr) continue;
    for (FeatureId key : deleted.keys) {
      ids.push_back({table->id, key});
      keys.push_back(RowKey(table->id, key));
    }
  }
  if (keys.empty()) return absl::OkStatus();
  // Only rows that exist lower the row counts.
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> found(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  db_->MultiGet(rocksdb::ReadOptions(), values(), keys.size(), slices.data(),
                found.data(), statuses.data());
  absl::flat_hash_set<RowId> gone;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!statuses[i].ok() && !statuses[i].IsNotFound()) {
      return absl::InternalError(
          absl::StrCat("serving store read failed: ", statuses[i].ToString()));
    }
    const bool exists = statuses[i].ok() || added.contains(ids[i]);
    if (exists && gone.insert(ids[i]).second) --delta[ids[i].table];
    batch.Delete(values(), keys[i]);
    writes.push_back({ids[i], {}});
  }
  return absl::OkStatus();
}

absl::Status RocksDbServingStore::BeginSnapshot(uint32_t shard_index) {
  absl::MutexLock write_lock(&write_mu_);
  rocksdb::WriteBatch batch;
  batch.Put(meta(), StoreRecords::kEpochKey, absl::StrCat(last_epoch_ + 1));
  STRATA_RETURN_IF_ERROR(Write(batch));
  ++last_epoch_;
  absl::MutexLock lock(&mu_);
  snapshot_epochs_[shard_index] = last_epoch_;
  return absl::OkStatus();
}

absl::Status RocksDbServingStore::EndSnapshot(uint32_t shard_index,
                                              const ShardPosition& position) {
  absl::MutexLock write_lock(&write_mu_);
  uint64_t epoch = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = snapshot_epochs_.find(shard_index);
    if (it == snapshot_epochs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", shard_index, " has no snapshot in progress"));
    }
    epoch = it->second;
  }
  // The shard's rows the snapshot did not write are gone from the shard.
  // The scan reads every row and holds write_mu_, so other shards' updates
  // wait: snapshots are rare (a new follower, a restarted shard).
  rocksdb::WriteBatch batch;
  std::vector<CachedWrite> deletes;
  absl::flat_hash_map<TableId, int64_t> delta;
  uint64_t swept = 0;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), values()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    RowId id;
    uint32_t shard = 0;
    uint64_t row_epoch = 0;
    const absl::string_view key(it->key().data(), it->key().size());
    const absl::string_view value(it->value().data(), it->value().size());
    if (!ParseRowKey(key, &id.table, &id.key) ||
        !ParseStamp(value, &shard, &row_epoch)) {
      return absl::DataLossError("serving store holds a malformed row");
    }
    if (shard != shard_index || row_epoch == epoch) continue;
    batch.Delete(values(), it->key());
    deletes.push_back({id, {}});
    --delta[id.table];
    if (deletes.size() == kSweepBatchRows) {
      STRATA_RETURN_IF_ERROR(Commit(batch, deletes, delta));
      swept += deletes.size();
      batch.Clear();
      deletes.clear();
      delta.clear();
    }
  }
  if (!it->status().ok()) {
    return absl::InternalError(
        absl::StrCat("serving store read failed: ", it->status().ToString()));
  }
  swept += deletes.size();
  batch.Put(meta(), StoreRecords::ShardKey(shard_index),
            StoreRecords::EncodeShard({position, epoch}));
  STRATA_RETURN_IF_ERROR(Commit(batch, deletes, delta));
  absl::MutexLock lock(&mu_);
  snapshot_epochs_.erase(shard_index);
  shards_[shard_index] = {position, epoch};
  if (swept > 0) {
    STRATA_LOG(INFO, "store") << "shard " << shard_index << ": deleted "
                              << swept << " rows its snapshot no longer has";
  }
  return absl::OkStatus();
}

}  // namespace serving_internal

absl::StatusOr<UnknownKeyPolicy> ParseUnknownKeyPolicy(absl::string_view name) {
  if (name == "zeros") return UnknownKeyPolicy::kZeros;
  if (name == "initializer") return UnknownKeyPolicy::kInitializer;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown-key policy must be zeros or initializer, not '", name, "'"));
}

absl::StatusOr<std::unique_ptr<ServingStore>> ServingStore::Open(
    const ServingStoreOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("the serving store needs a data_dir");
  }
  auto store = std::make_unique<serving_internal::RocksDbServingStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return store;
}

}  // namespace strata
