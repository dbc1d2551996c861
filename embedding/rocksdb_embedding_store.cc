// EmbeddingStore on RocksDB, the data path: opening and recovery, tables,
// lookups and writes (pushes are in rocksdb_embedding_store_push.cc). See
// embedding/internal/rocksdb_embedding_store.h.

#include "embedding/internal/rocksdb_embedding_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/system_memory.h"
#include "embedding/internal/sorted_runs_memtable.h"
#include "embedding/rocksdb_logger.h"
#include "embedding/storage_format.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"

namespace strata {
namespace embedding_internal {
namespace {
// Log kept before the oldest log's families are flushed, in memtables:
// two for each of the two row families.
constexpr uint64_t kMaxLogBuffers = 4;
}  // namespace

absl::Status RocksDbEmbeddingStore::OpenRocksDbLocked(absl::string_view what) {
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  db_options.info_log = RocksDbLogger();
  if (options_.rocksdb_env != nullptr) db_options.env = options_.rocksdb_env;
  // The store is written in large batches and read back mostly by
  // iterators (recovery, checkpoints), by point lookups only for bucket
  // moves and small records: an unsorted memtable makes each insert an
  // append instead of a skip-list search, which was most of a push's time
  // in sync and group modes. (RocksDB's vector memtable sorts at a flush,
  // needlessly for rows written in key order, as flushes and pushes
  // write them: our memtable finds those runs as they come and merges them
  // instead of sorting, see internal/sorted_runs_memtable.h.)
  // Tables with a memory budget read rows back one by one: they need the
  // skip list (sorted) and Bloom filters that spare disk reads for keys
  // never written.
  rocksdb::BlockBasedTableOptions table_options;
  if (!block_cache_)
    block_cache_ = rocksdb::NewLRUCache(options_.block_cache_bytes);
  table_options.block_cache = block_cache_;
  if (skiplist_memtables_) {
    table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  }
  db_options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options));
  if (!skiplist_memtables_) {
    db_options.memtable_factory =
        std::make_shared<embedding_internal::SortedRunsMemTableFactory>();
    db_options.allow_concurrent_memtable_write = false;
  }
  db_options.write_buffer_size = options_.write_buffer_bytes;
  // Rows are float32 of trained values and optimizer state, whose mantissas
  // are close to random: Snappy saved little on them and cost each flush
  // and compaction a pass over every block.
  db_options.compression = rocksdb::kNoCompression;
  // A log file is deleted only once every family with writes in it has
  // flushed, and the "default" family (tables, push windows) takes small
  // writes that rarely fill a memtable: by RocksDB's default bound (four
  // times all memtables, 1.5 GiB at 64 MiB) the logs piled up, and a
  // restart after a crash replayed them all. Past this bound RocksDB
  // flushes the families that hold the oldest log.
  db_options.max_total_wal_size = kMaxLogBuffers * options_.write_buffer_bytes;
  const rocksdb::ColumnFamilyOptions family_options(db_options);
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, family_options},
      {"values", family_options},
      {"optimizer", family_options}};
  rocksdb::DB* db = nullptr;
  read_only_ = false;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, files_.db_dir(), families, &handles_, &db);
  if (s.IsNoSpace() && what.empty()) {
    // A full disk: start read-only, so that pulls are answered; writes are
    // refused until a reopen (RecoverWritesLocked) finds space again.
    handles_.clear();
    rocksdb::Status read_only = rocksdb::DB::OpenForReadOnly(
        db_options, files_.db_dir(), families, &handles_, &db);
    if (read_only.ok()) {
      db_.reset(db);
      read_only_ = true;
      NoteWriteError(absl::ResourceExhaustedError(absl::StrCat(
          "the disk of ", options_.data_dir,
          " is full: the shard opened read-only (", s.ToString(), ")")));
      STRATA_LOG(WARNING, "store")
          << "the disk of " << options_.data_dir
          << " is full: opened read-only; writes resume once space is freed";
      return absl::OkStatus();
    }
  }
  if (!s.ok()) {
    const std::string name = what.empty()
                                 ? absl::StrCat("store in ", options_.data_dir)
                                 : std::string(what);
    if (s.IsCorruption() || s.IsPathNotFound()) {
      return absl::DataLossError(
          absl::StrCat(name, " is corrupt: ", s.ToString()));
    }
    return absl::InternalError(
        absl::StrCat("cannot open ", name, ": ", s.ToString()));
  }
  db_.reset(db);
  return absl::OkStatus();
}

absl::Status RocksDbEmbeddingStore::ReadOnlyError() const {
  return absl::ResourceExhaustedError(
      absl::StrCat("the disk of ", options_.data_dir,
                   " is full: the shard is read-only until space is freed"));
}

absl::Status RocksDbEmbeddingStore::RecoverWritesLocked() {
  if (!needs_recovery_.load()) return absl::OkStatus();
  if (read_only_) {
    // Opened read-only on a full disk: try to open for writing again, at
    // most once a second (an open is costly, and clients retry often).
    const absl::Time now = options_.clock->Now();
    if (now - last_reopen_attempt_ < absl::Seconds(1)) {
      return ReadOnlyError();
    }
    last_reopen_attempt_ = now;
    CloseDbLocked();
    STRATA_RETURN_IF_ERROR(OpenRocksDbLocked());
    if (read_only_) {
      return ReadOnlyError();
    }
    needs_recovery_.store(false);
    STRATA_LOG(INFO, "store") << "space is back: the store is writable again";
    return absl::OkStatus();
  }
  if (db_ != nullptr) {
    rocksdb::Status resumed = db_->Resume();
    if (resumed.ok()) {
      needs_recovery_.store(false);
      STRATA_LOG(INFO, "store") << "writes resumed after a failure";
      return absl::OkStatus();
    }
    if (resumed.IsBusy()) {
      // RocksDB recovers by itself (a full disk: its SstFileManager
      // resumes once space is free). Until then a full disk is what the
      // caller must hear of, not a transient state.
      if (disk_full_.load()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the disk of ", options_.data_dir,
            " is full: writes are refused until space is freed (the shard "
            "resumes by itself then)"));
      }
      return absl::UnavailableError(
          "the store is recovering from a failed write (a full disk resumes "
          "by itself once space is freed)");
    }
    // An error Resume cannot clear (a failed log write): reopen. Memory
    // keeps its rows; the disk keeps every write that worked.
    STRATA_LOG(WARNING, "store")
        << "reopening the store after a failed write: " << resumed.ToString();
    CloseDbLocked();
  }
  absl::Status reopened = OpenRocksDbLocked();
  if (!reopened.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the store cannot write since a failed write: ", reopened.message()));
  }
  needs_recovery_.store(false);
  STRATA_LOG(INFO, "store") << "writes resumed after reopening the store";
  return absl::OkStatus();
}

absl::Status RocksDbEmbeddingStore::OpenDbLocked(absl::string_view what) {
  STRATA_RETURN_IF_ERROR(OpenRocksDbLocked(what));
  if (!skiplist_memtables_ &&
      (options_.memory_budget_bytes > 0 || AnyBudgetedTableLocked())) {
    CloseDbLocked();
    skiplist_memtables_ = true;
    return OpenDbLocked(what);
  }
  return LoadLocked();
}

void RocksDbEmbeddingStore::CloseDbLocked() {
  if (!db_) return;
  ReleaseValueSnapshotsLocked();
  for (auto* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
  handles_.clear();
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::Status RocksDbEmbeddingStore::LoadLocked() {
  // Everything is read into fresh tables first and swapped in at once, so
  // that a concurrent pull never sees a table without its rows.
  TableMap tables;
  TableId next_table_id = 1;
  deduplicator_.Clear();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[0]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const absl::string_view key(it->key().data(), it->key().size());
    const absl::string_view value(it->value().data(), it->value().size());
    absl::string_view rest = key;
    if (absl::ConsumePrefix(&rest, kTableRecordPrefix)) {
      STRATA_ASSIGN_OR_RETURN(auto record, ParseTableRecord(value));
      const TableId id = record.first;
      next_table_id = std::max(next_table_id, id + 1);
      tables[record.second.name] = std::make_unique<EmbeddingTable>(
          record.second, id, options_.clock, options_.memory_budget_bytes > 0);
    } else if (absl::ConsumePrefix(&rest, kClientPrefix)) {
      STRATA_RETURN_IF_ERROR(
          deduplicator_.LoadWindow(std::string(rest), value));
    }
  }
  if (!it->status().ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot read tables: ", it->status().ToString()));
  }
  ShareShardBudget(tables);
  STRATA_ASSIGN_OR_RETURN(uint64_t rows, LoadRowsLocked(tables));
  STRATA_LOG(INFO, "store") << "loaded " << tables.size() << " tables, " << rows
                            << " rows from " << options_.data_dir;
  absl::MutexLock lock(&tables_mu_);
  tables_ = std::move(tables);
  next_table_id_ = next_table_id;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RocksDbEmbeddingStore::LoadRowsLocked(
    TableMap& tables) {
  absl::flat_hash_map<TableId, EmbeddingTable*> by_id;
  for (auto& [name, table] : tables) by_id[table->id()] = table.get();
  std::unique_ptr<rocksdb::Iterator> values(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[1]));
  std::unique_ptr<rocksdb::Iterator> states(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[2]));
  states->SeekToFirst();
  uint64_t rows = 0;
  std::vector<float> value, state;
  for (values->SeekToFirst(); values->Valid(); values->Next()) {
    TableId table_id;
    FeatureId key;
    if (!ParseRowKey(
            absl::string_view(values->key().data(), values->key().size()),
            &table_id, &key) ||
        !by_id.contains(table_id)) {
      return absl::DataLossError("stored row has a bad key or unknown table");
    }
    EmbeddingTable* table = by_id[table_id];
    if (values->value().size() != table->dim() * sizeof(float)) {
      return absl::DataLossError(
          absl::StrCat("stored row ", key, " of table '", table->config().name,
                       "' has ", values->value().size(), " bytes, expected ",
                       table->dim() * sizeof(float)));
    }
    state.assign(table->state_dim(), 0.0f);
    if (!state.empty()) {
      // Both families hold the same keys in the same order.
      while (states->Valid() && states->key().compare(values->key()) < 0) {
        states->Next();
      }
      if (!states->Valid() || states->key() != values->key() ||
          states->value().size() != state.size() * sizeof(float)) {
        return absl::DataLossError(absl::StrCat(
            "optimizer state of row ", key, " of table '", table->config().name,
            "' is missing or has a bad size"));
      }
      std::memcpy(state.data(), states->value().data(), states->value().size());
    }
    value.resize(table->dim());
    std::memcpy(value.data(), values->value().data(), values->value().size());
    table->PutRow(key, value.data(), state.data());
    ++rows;
  }
  if (!values->status().ok() || !states->status().ok()) {
    return absl::DataLossError("cannot read stored rows");
  }
  return rows;
}

namespace {

// CreateTable of a name that exists: nothing to create (false) for the same
// config, ALREADY_EXISTS naming what differs for another.
absl::StatusOr<bool> SameTableOrAlreadyExists(
    const EmbeddingTableConfig& existing, const EmbeddingTableConfig& asked) {
  if (SameTableConfig(existing, asked)) return false;
  return absl::AlreadyExistsError(
      absl::StrCat("table '", asked.name, "' already exists with another ",
                   "config: ", TableConfigDifference(existing, asked)));
}

}  // namespace

absl::StatusOr<bool> RocksDbEmbeddingStore::CreateTable(
    const EmbeddingTableConfig& config) {
  STRATA_RETURN_IF_ERROR(ValidateTableConfig(config));
  STRATA_RETURN_IF_ERROR(CheckFitsInMemory(
      absl::StrCat("table '", config.name, "': memory_budget_bytes"),
      config.memory_budget_bytes));
  if (config.memory_budget_bytes > 0) {
    {
      // An existing table needs no reopen (nor does a refused one).
      absl::ReaderMutexLock lock(&tables_mu_);
      if (EmbeddingTable* existing = FindTable(config.name)) {
        return SameTableOrAlreadyExists(existing->config(), config);
      }
    }
    STRATA_RETURN_IF_ERROR(EnablePointReads());
  }
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::MutexLock lock(&tables_mu_);
  if (EmbeddingTable* existing = FindTable(config.name)) {
    return SameTableOrAlreadyExists(existing->config(), config);
  }
  const TableId id = next_table_id_;
  rocksdb::WriteBatch batch;
  batch.Put(handles_[0], TableRecordKey(config.name),
            TableRecordValue(id, config));
  STRATA_RETURN_IF_ERROR(WriteLocked(batch, /*sync=*/true));
  ++next_table_id_;
  tables_[config.name] = std::make_unique<EmbeddingTable>(
      config, id, options_.clock, options_.memory_budget_bytes > 0);
  if (options_.memory_budget_bytes > 0) {
    // No push runs (the commit lock is held): rows may leave memory now.
    ShareShardBudget(tables_);
    for (auto& [name, table] : tables_) table->ShrinkToBudget();
  }
  change_log_.Append([&config](ChangeRecord& record) {
    record.created_table = std::make_unique<EmbeddingTableConfig>(config);
  });
  // Its write was synced, and with it every push before it (kSync holds
  // their records until an fsync covers them; after a failed one, this
  // write was refused).
  change_log_.Publish(change_log_.appended_sequence());
  STRATA_LOG(INFO, "store") << "created table " << SerializeTableConfig(config);
  return true;
}

std::vector<TableStats> RocksDbEmbeddingStore::ListTables() {
  absl::ReaderMutexLock lock(&tables_mu_);
  std::vector<TableStats> out;
  for (const auto& [name, table] : tables_) {
    TableStats stats;
    stats.config = table->config();
    stats.num_rows = table->num_rows();
    stats.memory_bytes = table->memory_bytes();
    stats.admitted_keys = table->admitted_keys();
    stats.rejected_gradients = table->rejected_gradients();
    stats.evicted_rows = table->evicted_rows();
    stats.rows_in_memory = table->rows_in_memory();
    out.push_back(std::move(stats));
  }
  std::sort(out.begin(), out.end(),
            [](const TableStats& a, const TableStats& b) {
              return a.config.name < b.config.name;
            });
  return out;
}

absl::StatusOr<EmbeddingTableConfig> RocksDbEmbeddingStore::GetTableConfig(
    absl::string_view table) {
  absl::ReaderMutexLock lock(&tables_mu_);
  EmbeddingTable* found = FindTable(table);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", table, "'"));
  }
  return found->config();
}

absl::Status RocksDbEmbeddingStore::Lookup(absl::string_view table,
                                           absl::Span<const FeatureId> keys,
                                           absl::Span<float> out) {
  bool cold_tier = false;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    EmbeddingTable* found = FindTable(table);
    if (found == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown table '", table, "'"));
    }
    if (out.size() != keys.size() * size_t{found->dim()}) {
      return absl::InvalidArgumentError(
          absl::StrCat("output of ", out.size(), " floats for ", keys.size(),
                       " keys of dimension ", found->dim()));
    }
    cold_tier = found->has_memory_budget();
    if (!cold_tier) {
      found->Lookup(keys, out.data());
      return absl::OkStatus();
    }
  }
  // Rows on disk: the commit lock (taken first) keeps the database open and
  // keeps a push from moving a row out of memory before its write is in.
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  EmbeddingTable* found = FindTable(table);
  if (found == nullptr || out.size() != keys.size() * size_t{found->dim()}) {
    return absl::UnavailableError(
        absl::StrCat("table '", table, "' changed during the lookup; retry"));
  }
  std::vector<uint32_t> misses;
  found->Lookup(keys, out.data(), &misses);
  if (misses.empty()) return absl::OkStatus();
  return ReadColdRowsLocked(*found, keys, misses, out.data());
}

absl::Status RocksDbEmbeddingStore::WriteLocked(rocksdb::WriteBatch& batch,
                                                bool sync) {
  const bool sync_mode = options_.durability == Durability::kSync;
  // After a failed fsync no later one may vouch for what it covered.
  if (sync_mode) STRATA_RETURN_IF_ERROR(CheckFsyncHealthy());
  rocksdb::WriteOptions write_options;
  write_options.sync = sync;
  rocksdb::Status s = db_->Write(write_options, &batch);
  if (!s.ok()) {
    // A synced write that failed for another reason than a full disk (whose
    // append fails before anything is synced) may have failed its fsync.
    if (sync_mode && sync && !s.IsNoSpace()) fsync_failed_.store(true);
    absl::Status error =
        s.IsNoSpace()
            ? absl::ResourceExhaustedError(absl::StrCat(
                  "the disk of ", options_.data_dir,
                  " is full: writes are refused until space is freed (",
                  s.ToString(), ")"))
            : absl::InternalError(
                  absl::StrCat("write to the store failed: ", s.ToString()));
    NoteWriteError(error);
    return error;
  }
  NoteWriteWorked();
  changed_rows_.Record(batch, handles_[1]->GetID());
  return absl::OkStatus();
}

void RocksDbEmbeddingStore::NoteWriteWorked() {
  if (write_error_set_.load(std::memory_order_relaxed)) {
    absl::MutexLock lock(&write_error_mu_);
    last_write_error_.clear();
    write_error_set_.store(false, std::memory_order_relaxed);
  }
}

void RocksDbEmbeddingStore::NoteWriteError(const absl::Status& error) {
  failed_writes_.fetch_add(1, std::memory_order_relaxed);
  needs_recovery_.store(true);
  disk_full_.store(absl::IsResourceExhausted(error));
  absl::MutexLock lock(&write_error_mu_);
  last_write_error_ = std::string(error.message());
  write_error_set_.store(true, std::memory_order_relaxed);
}

StorageStats RocksDbEmbeddingStore::GetStorageStats() {
  StorageStats stats;
  stats.failed_writes = failed_writes_.load(std::memory_order_relaxed);
  stats.unwritten_rows = unwritten_rows_.load(std::memory_order_relaxed);
  if (push_log_ != nullptr) stats.push_log_bytes = push_log_->bytes();
  {
    absl::MutexLock error_lock(&write_error_mu_);
    stats.write_error = last_write_error_;
  }
  absl::ReaderMutexLock lock(&commit_mu_);
  if (db_ == nullptr) return stats;
  // Properties summed over every column family (GetAggregatedIntProperty),
  // except the block cache, which the families share.
  rocksdb::DB* db = db_.get();
  auto sum = [db](const std::string& property, uint64_t* out) {
    uint64_t value = 0;
    if (db->GetAggregatedIntProperty(property, &value)) *out = value;
  };
  sum(rocksdb::DB::Properties::kCurSizeAllMemTables, &stats.memtable_bytes);
  sum(rocksdb::DB::Properties::kNumImmutableMemTable,
      &stats.immutable_memtables);
  sum(rocksdb::DB::Properties::kEstimatePendingCompactionBytes,
      &stats.pending_compaction_bytes);
  sum(rocksdb::DB::Properties::kTotalSstFilesSize, &stats.sst_bytes);
  uint64_t value = 0;
  if (db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningFlushes,
                          &value)) {
    stats.running_flushes = value;
  }
  if (db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions,
                          &value)) {
    stats.running_compactions = value;
  }
  if (db_->GetIntProperty(rocksdb::DB::Properties::kBlockCacheUsage, &value)) {
    stats.block_cache_bytes = value;
  }
  return stats;
}

}  // namespace embedding_internal

absl::string_view DurabilityName(Durability durability) {
  switch (durability) {
    case Durability::kSync:
      return "sync";
    case Durability::kGroup:
      return "group";
    case Durability::kPeriodic:
      return "periodic";
  }
  return "unknown";
}

absl::StatusOr<Durability> ParseDurability(absl::string_view name) {
  for (Durability d :
       {Durability::kSync, Durability::kGroup, Durability::kPeriodic}) {
    if (name == DurabilityName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown durability '", name, "' (expected sync, group or periodic)"));
}

absl::StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Open(
    const EmbeddingStoreOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("data_dir is required");
  }
  if (options.durability != Durability::kSync &&
      options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("flush_interval must be positive");
  }
  auto store =
      std::make_unique<embedding_internal::RocksDbEmbeddingStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return store;
}

}  // namespace strata
