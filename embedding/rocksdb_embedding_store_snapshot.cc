// Value snapshots for new followers of the change stream: a RocksDB
// snapshot taken at one sequence of the change log, read a chunk at a time
// from the "values" column family.
//
// In kSync and kGroup modes every push writes its rows to RocksDB before it
// reaches memory or the change log, so RocksDB at that sequence holds what
// memory held; in kPeriodic and kGroup mode the dirty rows are written
// first.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"

namespace strata {
namespace embedding_internal {

// What a reader needs of each of its tables (their ids, beside tables()),
// and where it stands. Its fields are read and written by the store, under
// commit_mu_ (snapshot_ and iterator_ also under snapshot_readers_mu_).
class RocksDbValueSnapshotReader final : public ValueSnapshotReader {
 public:
  RocksDbValueSnapshotReader(RocksDbEmbeddingStore* store,
                             const rocksdb::Snapshot* snapshot,
                             uint64_t incarnation, uint64_t sequence,
                             std::vector<EmbeddingTableConfig> configs,
                             std::vector<TableId> ids)
      : ValueSnapshotReader(incarnation, sequence, std::move(configs)),
        store_(store),
        snapshot_(snapshot),
        ids_(std::move(ids)) {}
  ~RocksDbValueSnapshotReader() override { store_->CloseValueSnapshot(this); }

  absl::StatusOr<bool> Next(ChangedRows& chunk) override {
    return store_->ReadSnapshotChunk(*this, chunk);
  }

 private:
  friend class RocksDbEmbeddingStore;

  RocksDbEmbeddingStore* const store_;
  // Null once the store closed its database.
  const rocksdb::Snapshot* snapshot_;
  // The row-key prefix of each of tables().
  const std::vector<TableId> ids_;
  // Over the values at snapshot_, created by the first chunk; null once the
  // store closed its database. Pins the memtable and files it reads (a
  // stalled follower is cut off after the stall timeout).
  std::unique_ptr<rocksdb::Iterator> iterator_;
  // The table being read, and whether iterator_ is on its rows yet.
  size_t table_ = 0;
  bool positioned_ = false;
};

absl::StatusOr<std::unique_ptr<ValueSnapshotReader>>
RocksDbEmbeddingStore::OpenValueSnapshot(absl::Span<const std::string> names) {
  // flush_mu_ first (lock order), for the write of dirty rows.
  absl::MutexLock flush_lock(&flush_mu_);
  // Exclusive: no push is between applying its rows and logging them.
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  if (BuffersPushes()) {
    STRATA_RETURN_IF_ERROR(FlushLocked());
  }
  if (options_.durability == Durability::kSync) {
    // The snapshot must hold no push whose fsync is still to come (or
    // failed): sync first, which also publishes what it covers.
    STRATA_RETURN_IF_ERROR(SyncLogAndPublishLocked(/*through=*/0));
  }
  std::vector<EmbeddingTableConfig> configs;
  std::vector<TableId> ids;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    auto choose = [&](const EmbeddingTable& table) {
      configs.push_back(table.config());
      ids.push_back(table.id());
    };
    if (names.empty()) {
      for (auto& [name, table] : tables_) choose(*table);
    }
    for (const std::string& name : names) {
      const EmbeddingTable* table = FindTable(name);
      if (table == nullptr) {
        return absl::NotFoundError(absl::StrCat("unknown table '", name, "'"));
      }
      choose(*table);
    }
  }
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  if (snapshot == nullptr) {
    return absl::InternalError("RocksDB gave no snapshot of the store");
  }
  auto reader = std::make_unique<RocksDbValueSnapshotReader>(
      this, snapshot, change_log_.incarnation(), change_log_.latest_sequence(),
      std::move(configs), std::move(ids));
  absl::MutexLock lock(&snapshot_readers_mu_);
  snapshot_readers_.insert(reader.get());
  return reader;
}

absl::StatusOr<bool> RocksDbEmbeddingStore::ReadSnapshotChunk(
    RocksDbValueSnapshotReader& reader, ChangedRows& chunk) {
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  if (reader.snapshot_ == nullptr || db_ == nullptr) {
    return absl::AbortedError(
        "the store was restored or reopened during the snapshot; start over");
  }
  // One iterator for the whole read: a new one would sort the (unsorted,
  // vector) memtable again for every chunk.
  if (reader.iterator_ == nullptr) {
    rocksdb::ReadOptions read_options;
    read_options.snapshot = reader.snapshot_;
    reader.iterator_.reset(db_->NewIterator(read_options, handles_[1]));
    reader.positioned_ = false;
  }
  rocksdb::Iterator& it = *reader.iterator_;
  for (; reader.table_ < reader.ids_.size();
       ++reader.table_, reader.positioned_ = false) {
    const EmbeddingTableConfig& table = reader.tables()[reader.table_];
    const TableId table_id = reader.ids_[reader.table_];
    const size_t row_bytes = size_t{table.dim} * sizeof(float);
    const size_t max_rows = std::clamp<size_t>(kSnapshotChunkBytes / row_bytes,
                                               1, kSnapshotChunkRows);
    chunk.table = table.name;
    chunk.dim = table.dim;
    chunk.keys.clear();
    chunk.values.clear();
    if (!reader.positioned_) {
      it.Seek(RowKey(table_id, 0));
      reader.positioned_ = true;
    }
    for (; it.Valid(); it.Next()) {
      TableId id;
      FeatureId key;
      if (!ParseRowKey(absl::string_view(it.key().data(), it.key().size()), &id,
                       &key) ||
          id != table_id) {
        break;
      }
      if (it.value().size() != row_bytes) continue;
      chunk.keys.push_back(key);
      chunk.values.resize(chunk.values.size() + table.dim);
      // Values in a RocksDB slice need not be aligned for floats.
      std::memcpy(chunk.values.data() + chunk.values.size() - table.dim,
                  it.value().data(), row_bytes);
      if (chunk.keys.size() == max_rows) {
        it.Next();  // The next chunk starts after this row.
        return true;
      }
    }
    if (!it.status().ok()) {
      return absl::InternalError(
          absl::StrCat("cannot read the rows of table '", table.name,
                       "' for a snapshot: ", it.status().ToString()));
    }
    if (!chunk.keys.empty()) {
      ++reader.table_;
      reader.positioned_ = false;
      return true;
    }
  }
  return false;
}

void RocksDbEmbeddingStore::CloseValueSnapshot(
    RocksDbValueSnapshotReader* reader) {
  // Shared: the database stays open while the snapshot is released.
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  absl::MutexLock lock(&snapshot_readers_mu_);
  snapshot_readers_.erase(reader);
  reader->iterator_.reset();
  if (reader->snapshot_ != nullptr && db_ != nullptr) {
    db_->ReleaseSnapshot(reader->snapshot_);
  }
  reader->snapshot_ = nullptr;
}

void RocksDbEmbeddingStore::ReleaseValueSnapshotsLocked() {
  absl::MutexLock lock(&snapshot_readers_mu_);
  for (RocksDbValueSnapshotReader* reader : snapshot_readers_) {
    reader->iterator_.reset();
    if (reader->snapshot_ != nullptr) db_->ReleaseSnapshot(reader->snapshot_);
    reader->snapshot_ = nullptr;
  }
}

}  // namespace embedding_internal
}  // namespace strata
