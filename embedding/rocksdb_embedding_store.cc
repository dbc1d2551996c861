// EmbeddingStore on RocksDB, the data path: opening and recovery, tables,
// lookups and pushes. See embedding/internal/rocksdb_embedding_store.h.

#include "embedding/internal/rocksdb_embedding_store.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "embedding/storage_format.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/table.h"

namespace strata {
namespace embedding_internal {
namespace {

// Larger gradients would overflow float32 when squared by the optimizers.
constexpr float kMaxGradientMagnitude = 1e18f;

absl::Status FirstInvalidGradient(const GradientBatch& batch, uint32_t dim) {
  if (batch.keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", batch.table, "': empty batch of keys"));
  }
  if (batch.gradients.size() != batch.keys.size() * size_t{dim}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", batch.table, "': ", batch.gradients.size(),
        " gradient values for ", batch.keys.size(), " keys of dimension ", dim,
        " (expected ", batch.keys.size() * size_t{dim}, ")"));
  }
  for (size_t i = 0; i < batch.gradients.size(); ++i) {
    if (!std::isfinite(batch.gradients[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", batch.table, "': gradient of key ", batch.keys[i / dim],
          " holds a non-finite value (", batch.gradients[i], ")"));
    }
    if (std::fabs(batch.gradients[i]) > kMaxGradientMagnitude) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", batch.table, "': gradient of key ", batch.keys[i / dim],
          " has magnitude ", batch.gradients[i], ", over the limit of ",
          kMaxGradientMagnitude, " (its square would overflow float32)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RocksDbEmbeddingStore::OpenDbLocked() {
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  if (options_.rocksdb_env != nullptr) db_options.env = options_.rocksdb_env;
  // The store is written in large batches and read back only by iterators
  // (recovery, checkpoints), never by point lookups: an unsorted vector
  // memtable makes each insert an append instead of a skip-list search,
  // which was most of a push's time in sync and group modes.
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
    db_options.memtable_factory.reset(new rocksdb::VectorRepFactory());
    db_options.allow_concurrent_memtable_write = false;
  }
  db_options.write_buffer_size = options_.write_buffer_bytes;
  const rocksdb::ColumnFamilyOptions family_options(db_options);
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, family_options},
      {"values", family_options},
      {"optimizer", family_options}};
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, files_.db_dir(), families, &handles_, &db);
  if (!s.ok()) {
    if (s.IsCorruption() || s.IsPathNotFound()) {
      return absl::DataLossError(absl::StrCat("store in ", options_.data_dir,
                                              " is corrupt: ", s.ToString()));
    }
    return absl::InternalError(absl::StrCat(
        "cannot open store in ", options_.data_dir, ": ", s.ToString()));
  }
  db_.reset(db);
  if (!skiplist_memtables_ &&
      (options_.memory_budget_bytes > 0 || AnyBudgetedTableLocked())) {
    CloseDbLocked();
    skiplist_memtables_ = true;
    return OpenDbLocked();
  }
  return LoadLocked();
}

void RocksDbEmbeddingStore::CloseDbLocked() {
  if (!db_) return;
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

absl::StatusOr<bool> RocksDbEmbeddingStore::CreateTable(
    const EmbeddingTableConfig& config) {
  STRATA_RETURN_IF_ERROR(ValidateTableConfig(config));
  if (config.memory_budget_bytes > 0) {
    {
      // An existing table needs no reopen (nor does a refused one).
      absl::ReaderMutexLock lock(&tables_mu_);
      if (EmbeddingTable* existing = FindTable(config.name)) {
        if (SameTableConfig(existing->config(), config)) return false;
        return absl::AlreadyExistsError(absl::StrCat(
            "table '", config.name, "' already exists with another config: ",
            SerializeTableConfig(existing->config())));
      }
    }
    STRATA_RETURN_IF_ERROR(EnablePointReads());
  }
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::MutexLock lock(&tables_mu_);
  if (EmbeddingTable* existing = FindTable(config.name)) {
    if (SameTableConfig(existing->config(), config)) return false;
    return absl::AlreadyExistsError(absl::StrCat(
        "table '", config.name, "' already exists with another config: ",
        SerializeTableConfig(existing->config())));
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

absl::StatusOr<bool> RocksDbEmbeddingStore::ApplyGradients(
    absl::Span<const GradientBatch> batches, const PushId& id) {
  const bool periodic = options_.durability == Durability::kPeriodic;
  if (periodic) {
    commit_mu_.ReaderLock();
  } else {
    commit_mu_.Lock();
  }
  auto unlock = [&] {
    if (periodic) {
      commit_mu_.ReaderUnlock();
    } else {
      commit_mu_.Unlock();
    }
  };
  if (absl::Status open = CheckOpenLocked(); !open.ok()) {
    unlock();
    return open;
  }
  std::vector<EmbeddingTable*> tables;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const GradientBatch& batch : batches) {
      EmbeddingTable* table = FindTable(batch.table);
      if (table == nullptr) {
        unlock();
        return absl::NotFoundError(
            absl::StrCat("unknown table '", batch.table, "'"));
      }
      if (absl::Status s = FirstInvalidGradient(batch, table->dim()); !s.ok()) {
        unlock();
        return s;
      }
      tables.push_back(table);
    }
  }
  const bool deduplicated = !id.client_id.empty() && id.sequence > 0;
  if (deduplicated && !deduplicator_.Claim(id.client_id, id.sequence)) {
    unlock();
    return true;
  }
  // Tables are never dropped while commit_mu_ is held, so the pointers stay
  // valid without tables_mu_.
  absl::Status written = absl::OkStatus();
  // A stored row that could not be read: its key was skipped.
  absl::Status load_error = absl::OkStatus();
  if (periodic) {
    // Pushes apply concurrently (stripe locks only); the record of each is
    // filled afterwards by reading its rows again under the log's lock, so
    // that of two pushes changing a row, the later record carries the later
    // value. Only the keys updated (admitted) go into the record.
    // Without admission every key is updated, and no visitor is needed.
    std::vector<std::vector<FeatureId>> updated(batches.size());
    for (size_t b = 0; b < batches.size(); ++b) {
      std::vector<FeatureId>& keys = updated[b];
      EmbeddingTable::RowVisitor collect;
      // Admission may refuse a key, and a budgeted table skips a key whose
      // stored row could not be read: the record holds the updated keys.
      if (CountsSightings(tables[b]->config().admission) ||
          tables[b]->has_memory_budget()) {
        keys.reserve(batches[b].keys.size());
        collect = [&keys](FeatureId key, const float*, const float*) {
          keys.push_back(key);
        };
      } else {
        keys.assign(batches[b].keys.begin(), batches[b].keys.end());
      }
      tables[b]->ApplyGradients(batches[b].keys, batches[b].gradients.data(),
                                /*track_dirty=*/true, collect,
                                batches[b].global_step,
                                ColdRowLoaderLocked(*tables[b], &load_error));
    }
    change_log_.Append([&](ChangeRecord& change) {
      change.rows.resize(batches.size());
      for (size_t b = 0; b < batches.size(); ++b) {
        ChangedRows& rows = change.rows[b];
        rows.table = std::string(batches[b].table);
        rows.dim = tables[b]->dim();
        rows.keys = std::move(updated[b]);
        rows.values.resize(rows.keys.size() * rows.dim);
        tables[b]->Lookup(rows.keys, rows.values.data());
      }
    });
  } else {
    // Pushes are serialized by the commit lock: each is applied inside its
    // change-log append, and a changed row's new value goes into the record
    // and the write batch while it is still in cache.
    change_log_.Append([&](ChangeRecord& change) {
      rocksdb::WriteBatch write;
      change.rows.resize(batches.size());
      for (size_t b = 0; b < batches.size(); ++b) {
        ChangedRows& rows = change.rows[b];
        const TableId table_id = tables[b]->id();
        const uint32_t dim = tables[b]->dim();
        const uint32_t state_dim = tables[b]->state_dim();
        rows.table = std::string(batches[b].table);
        rows.dim = dim;
        rows.keys.reserve(batches[b].keys.size());
        rows.values.reserve(batches[b].keys.size() * dim);
        tables[b]->ApplyGradients(
            batches[b].keys, batches[b].gradients.data(),
            /*track_dirty=*/false,
            [&](FeatureId key, const float* value, const float* state) {
              rows.keys.push_back(key);
              rows.values.insert(rows.values.end(), value, value + dim);
              const std::string row_key = RowKey(table_id, key);
              write.Put(handles_[1], row_key, FloatSlice(value, dim));
              if (state_dim > 0) {
                write.Put(handles_[2], row_key, FloatSlice(state, state_dim));
              }
            },
            batches[b].global_step,
            ColdRowLoaderLocked(*tables[b], &load_error),
            // With a memory budget the rows stay in memory until their
            // write is in: another batch of this push must not read them
            // back from disk.
            /*keep_pinned=*/tables[b]->has_memory_budget());
      }
      if (deduplicated) {
        write.Put(handles_[0], absl::StrCat(kClientPrefix, id.client_id),
                  deduplicator_.SerializeWindow(id.client_id));
      }
      written = WriteLocked(write, /*sync=*/false);
      // Rows whose write failed stay pinned: memory holds their only copy.
      for (size_t b = 0; b < batches.size() && written.ok(); ++b) {
        tables[b]->Unpin(batches[b].keys);
      }
    });
  }
  unlock();
  STRATA_RETURN_IF_ERROR(written);
  STRATA_RETURN_IF_ERROR(load_error);
  if (options_.durability == Durability::kSync) {
    // After releasing the exclusive lock, so that concurrent pushes share one
    // fsync: it makes every write before it durable, ours included. The
    // shared lock keeps Restore from closing the database meanwhile.
    absl::ReaderMutexLock lock(&commit_mu_);
    STRATA_RETURN_IF_ERROR(CheckOpenLocked());
    rocksdb::Status s = db_->SyncWAL();
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat("fsync of the log failed: ", s.ToString()));
    }
  }
  return false;
}

absl::Status RocksDbEmbeddingStore::WriteLocked(rocksdb::WriteBatch& batch,
                                                bool sync) {
  rocksdb::WriteOptions write_options;
  write_options.sync = sync;
  rocksdb::Status s = db_->Write(write_options, &batch);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("write to the store failed: ", s.ToString()));
  }
  changed_rows_.Record(batch, handles_[1]->GetID());
  return absl::OkStatus();
}

StorageStats RocksDbEmbeddingStore::GetStorageStats() {
  StorageStats stats;
  absl::ReaderMutexLock lock(&commit_mu_);
  if (db_ == nullptr) return stats;
  // Properties summed over every column family (GetAggregatedIntProperty),
  // except the block cache, which the families share.
  auto sum = [this](const std::string& property, uint64_t* out) {
    uint64_t value = 0;
    if (db_->GetAggregatedIntProperty(property, &value)) *out = value;
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
  if (options.durability == Durability::kPeriodic &&
      options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("flush_interval must be positive");
  }
  auto store =
      std::make_unique<embedding_internal::RocksDbEmbeddingStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return store;
}

}  // namespace strata
