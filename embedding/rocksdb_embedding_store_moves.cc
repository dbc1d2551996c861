// EmbeddingStore on RocksDB, what bucket moves need: rows exported with
// their optimizer state, written at the shard that receives them, and
// dropped at the one they left, none of it through the change stream. See
// embedding/internal/rocksdb_embedding_store.h.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"

namespace strata {
namespace embedding_internal {
namespace {

// Rows one ExportRows call scans on disk at most (a table with a memory
// budget), so that the pushes it holds up wait for a bounded time.
constexpr size_t kMaxScannedRowsPerExport = 65536;

absl::Status CheckBlockSizes(const RowBlock& rows,
                             const EmbeddingTable& table) {
  const size_t n = rows.keys.size();
  if (rows.values.size() != n * table.dim() ||
      rows.states.size() != n * table.state_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows of table '", rows.table, "': ", n, " keys with ",
                     rows.values.size(), " value and ", rows.states.size(),
                     " state floats, but the table has dim ", table.dim(),
                     " and optimizer state dim ", table.state_dim()));
  }
  for (size_t i = 0; i < rows.values.size(); ++i) {
    if (!std::isfinite(rows.values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", rows.keys[i / table.dim()], " of table '",
                       rows.table, "' holds a value that is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RocksDbEmbeddingStore::ReadRowsLocked(
    const EmbeddingTable& table, absl::Span<const FeatureId> keys,
    RowBlock& block) {
  const uint32_t dim = table.dim(), state_dim = table.state_dim();
  std::vector<float> value(dim), state(state_dim);
  auto add = [&](FeatureId key) {
    block.keys.push_back(key);
    block.values.insert(block.values.end(), value.begin(), value.end());
    block.states.insert(block.states.end(), state.begin(), state.end());
  };
  for (FeatureId key : keys) {
    if (table.ReadRow(key, value.data(), state.data())) {
      add(key);
      continue;
    }
    if (!table.has_memory_budget()) {
      block.absent.push_back(key);
      continue;
    }
    const std::string row_key = RowKey(table.id(), key);
    rocksdb::PinnableSlice stored;
    rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), handles_[1], row_key, &stored);
    if (s.IsNotFound()) {
      block.absent.push_back(key);
      continue;
    }
    if (!s.ok() || stored.size() != dim * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "cannot read row ", key, " of table '", table.config().name,
          "' from disk: ", s.ok() ? "bad size" : s.ToString()));
    }
    std::memcpy(value.data(), stored.data(), stored.size());
    if (state_dim > 0) {
      stored.Reset();
      s = db_->Get(rocksdb::ReadOptions(), handles_[2], row_key, &stored);
      if (!s.ok() || stored.size() != state_dim * sizeof(float)) {
        return absl::DataLossError(
            absl::StrCat("cannot read the optimizer state of row ", key,
                         " of table '", table.config().name,
                         "' from disk: ", s.ok() ? "bad size" : s.ToString()));
      }
      std::memcpy(state.data(), stored.data(), stored.size());
    }
    add(key);
  }
  return absl::OkStatus();
}

std::vector<FeatureId> RocksDbEmbeddingStore::ScanDiskKeysLocked(
    const EmbeddingTable& table, const RowSelector& select, FeatureId start,
    size_t max_keys, size_t max_scanned, FeatureId* next, bool* end) {
  std::vector<FeatureId> keys;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[1]));
  *end = true;
  size_t scanned = 0;
  for (it->Seek(RowKey(table.id(), start)); it->Valid(); it->Next()) {
    TableId id = 0;
    FeatureId key = 0;
    if (!ParseRowKey(absl::string_view(it->key().data(), it->key().size()), &id,
                     &key) ||
        id != table.id()) {
      break;
    }
    if (select(key)) keys.push_back(key);
    if (key == UINT64_MAX) break;
    if (++scanned >= max_scanned || keys.size() >= max_keys) {
      *next = key + 1;
      *end = false;
      break;
    }
  }
  return keys;
}

absl::StatusOr<std::vector<bool>> RocksDbEmbeddingStore::StoredOnDiskLocked(
    const EmbeddingTable& table, absl::Span<const FeatureId> keys) {
  std::vector<bool> stored(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    rocksdb::PinnableSlice value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), handles_[1],
                                 RowKey(table.id(), keys[i]), &value);
    if (!s.ok() && !s.IsNotFound()) {
      return absl::InternalError(
          absl::StrCat("cannot read row ", keys[i], " of table '",
                       table.config().name, "': ", s.ToString()));
    }
    stored[i] = s.ok();
  }
  return stored;
}

absl::StatusOr<RowBlock> RocksDbEmbeddingStore::ExportRows(
    absl::string_view name, const RowSelector& select, ExportCursor& cursor,
    size_t max_rows) {
  // Shared: in kSync and kGroup modes pushes (which hold it exclusively)
  // wait, so memory and disk agree; in kPeriodic mode each row is read
  // whole under its stripe lock.
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  const EmbeddingTable* table = FindTable(name);
  if (table == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", name, "'"));
  }
  RowBlock block;
  block.table = std::string(name);
  max_rows = std::max<size_t>(max_rows, 1);
  while (!cursor.done && block.keys.size() < max_rows) {
    const size_t room = max_rows - block.keys.size();
    if (cursor.stripe < EmbeddingTable::num_stripes()) {
      const std::vector<FeatureId> keys =
          table->SelectKeysOfStripe(cursor.stripe, select);
      const size_t begin = std::min<size_t>(cursor.offset, keys.size());
      const size_t count = std::min(keys.size() - begin, room);
      STRATA_RETURN_IF_ERROR(ReadRowsLocked(
          *table, absl::MakeConstSpan(keys).subspan(begin, count), block));
      cursor.offset = begin + count;
      if (cursor.offset >= keys.size()) {
        ++cursor.stripe;
        cursor.offset = 0;
      }
      continue;
    }
    if (!table->has_memory_budget()) {
      cursor.done = true;
      break;
    }
    // The rows on disk only (those in memory come again, harmlessly).
    FeatureId next = 0;
    bool end = true;
    const std::vector<FeatureId> keys =
        ScanDiskKeysLocked(*table, select, cursor.disk_key, room,
                           kMaxScannedRowsPerExport, &next, &end);
    STRATA_RETURN_IF_ERROR(ReadRowsLocked(*table, keys, block));
    cursor.disk_key = next;
    cursor.done = end;
    break;
  }
  return block;
}

absl::StatusOr<RowBlock> RocksDbEmbeddingStore::ReadRows(
    absl::string_view name, absl::Span<const FeatureId> keys) {
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  const EmbeddingTable* table = FindTable(name);
  if (table == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", name, "'"));
  }
  RowBlock block;
  block.table = std::string(name);
  STRATA_RETURN_IF_ERROR(ReadRowsLocked(*table, keys, block));
  return block;
}

absl::Status RocksDbEmbeddingStore::WriteRows(const RowBlock& rows) {
  {
    // Bad input is refused before anything waits for the disk.
    absl::ReaderMutexLock lock(&tables_mu_);
    const EmbeddingTable* table = FindTable(rows.table);
    if (table == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("unknown table '", rows.table, "'"));
    }
    STRATA_RETURN_IF_ERROR(CheckBlockSizes(rows, *table));
  }
  // flush_mu_: no flush cut taken before this write puts older rows back.
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  // kGroup: the push log may hold older rows of these keys (a bucket that
  // left and came back), which a replay would put over them; a flush
  // empties it first.
  if (push_log_ != nullptr) STRATA_RETURN_IF_ERROR(FlushLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  EmbeddingTable* table = FindTable(rows.table);
  if (table == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown table '", rows.table, "'"));
  }
  STRATA_RETURN_IF_ERROR(CheckBlockSizes(rows, *table));
  const uint32_t dim = table->dim(), state_dim = table->state_dim();
  std::vector<FeatureId> touched = rows.keys;
  touched.insert(touched.end(), rows.absent.begin(), rows.absent.end());
  std::vector<bool> on_disk;
  if (table->has_memory_budget()) {
    STRATA_ASSIGN_OR_RETURN(on_disk, StoredOnDiskLocked(*table, touched));
  }
  rocksdb::WriteBatch write;
  for (size_t i = 0; i < rows.keys.size(); ++i) {
    const std::string row_key = RowKey(table->id(), rows.keys[i]);
    write.Put(handles_[1], row_key,
              FloatSlice(rows.values.data() + i * dim, dim));
    if (state_dim > 0) {
      write.Put(handles_[2], row_key,
                FloatSlice(rows.states.data() + i * state_dim, state_dim));
    }
  }
  for (FeatureId key : rows.absent) {
    const std::string row_key = RowKey(table->id(), key);
    write.Delete(handles_[1], row_key);
    write.Delete(handles_[2], row_key);
  }
  // Synced in every mode: the shard the rows leave deletes its copy once
  // the map gives them here.
  STRATA_RETURN_IF_ERROR(WriteLocked(write, /*sync=*/true));
  // Memory follows the disk: old copies leave (a budgeted table's rows on
  // disk only leave its count), then the new rows come in.
  if (table->has_memory_budget()) {
    uint64_t cold = 0;
    for (size_t i = 0; i < touched.size(); ++i) {
      const bool in_memory = table->RemoveRows({touched[i]}) > 0;
      if (on_disk[i] && !in_memory) ++cold;
    }
    table->ForgetColdRows(cold);
  } else {
    // Every row is in memory; PutRow replaces the others.
    table->RemoveRows(rows.absent);
  }
  for (size_t i = 0; i < rows.keys.size(); ++i) {
    table->PutRow(rows.keys[i], rows.values.data() + i * dim,
                  rows.states.data() + i * state_dim);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RocksDbEmbeddingStore::DropRows(
    absl::string_view name, const RowSelector& select) {
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  EmbeddingTable* table = FindTable(name);
  if (table == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", name, "'"));
  }
  absl::flat_hash_set<FeatureId> keys;
  for (size_t s = 0; s < EmbeddingTable::num_stripes(); ++s) {
    for (FeatureId key : table->SelectKeysOfStripe(s, select)) keys.insert(key);
  }
  if (table->has_memory_budget()) {
    FeatureId next = 0;
    bool end = true;
    for (FeatureId key : ScanDiskKeysLocked(*table, select, 0, SIZE_MAX,
                                            SIZE_MAX, &next, &end)) {
      keys.insert(key);
    }
  }
  if (keys.empty()) return 0;
  rocksdb::WriteBatch write;
  std::vector<FeatureId> sorted(keys.begin(), keys.end());
  std::sort(sorted.begin(), sorted.end());
  for (FeatureId key : sorted) {
    const std::string row_key = RowKey(table->id(), key);
    write.Delete(handles_[1], row_key);
    write.Delete(handles_[2], row_key);
  }
  // Not synced: a deletion lost in a crash only brings back rows no client
  // routes to this shard, and the move's end drops them again.
  STRATA_RETURN_IF_ERROR(WriteLocked(write, /*sync=*/false));
  const uint64_t in_memory = table->RemoveRows(sorted);
  if (table->has_memory_budget())
    table->ForgetColdRows(sorted.size() - in_memory);
  return sorted.size();
}

}  // namespace embedding_internal
}  // namespace strata
