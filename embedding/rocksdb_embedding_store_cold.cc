// EmbeddingStore on RocksDB, the cold tier: tables with a memory budget keep
// their least recently pushed rows on disk only, and read them back from
// RocksDB when pulled (batched with MultiGet) or pushed. See
// embedding/internal/rocksdb_embedding_store.h.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"

namespace strata {
namespace embedding_internal {

absl::Status RocksDbEmbeddingStore::ReadColdRowsLocked(
    const EmbeddingTable& table, absl::Span<const FeatureId> keys,
    absl::Span<const uint32_t> misses, float* out) {
  const uint32_t dim = table.dim();
  std::vector<std::string> row_keys;
  row_keys.reserve(misses.size());
  for (uint32_t i : misses) row_keys.push_back(RowKey(table.id(), keys[i]));
  std::vector<rocksdb::Slice> slices(row_keys.begin(), row_keys.end());
  std::vector<rocksdb::PinnableSlice> values(slices.size());
  std::vector<rocksdb::Status> statuses(slices.size());
  db_->MultiGet(rocksdb::ReadOptions(), handles_[1], slices.size(),
                slices.data(), values.data(), statuses.data());
  for (size_t m = 0; m < misses.size(); ++m) {
    float* target = out + size_t{misses[m]} * dim;
    if (statuses[m].IsNotFound()) {
      table.InitialValue(keys[misses[m]], target);
    } else if (!statuses[m].ok()) {
      return absl::InternalError(absl::StrCat(
          "cannot read row ", keys[misses[m]], " of table '",
          table.config().name, "' from disk: ", statuses[m].ToString()));
    } else if (values[m].size() != dim * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "stored row ", keys[misses[m]], " of table '", table.config().name,
          "' has ", values[m].size(), " bytes"));
    } else {
      std::memcpy(target, values[m].data(), values[m].size());
    }
  }
  return absl::OkStatus();
}

EmbeddingTable::RowLoader RocksDbEmbeddingStore::ColdRowLoaderLocked(
    const EmbeddingTable& table, absl::Status* error) {
  using LoadResult = EmbeddingTable::LoadResult;
  if (!table.has_memory_budget()) return nullptr;
  rocksdb::DB* db = db_.get();
  rocksdb::ColumnFamilyHandle* values = handles_[1];
  rocksdb::ColumnFamilyHandle* states = handles_[2];
  const TableId id = table.id();
  const uint32_t dim = table.dim(), state_dim = table.state_dim();
  const std::string name = table.config().name;
  // Called under the key's stripe lock, within the push's commit lock, so
  // that nothing moves the row between the read and the update.
  return [=](FeatureId key, float* value, float* state) {
    auto fail = [&](const std::string& why) {
      if (error->ok()) {
        *error = absl::InternalError(absl::StrCat(
            "cannot read row ", key, " of table '", name, "' from disk (", why,
            "); its gradient was not applied"));
      }
      return LoadResult::kFailed;
    };
    const std::string row_key = RowKey(id, key);
    rocksdb::PinnableSlice stored;
    rocksdb::Status s =
        db->Get(rocksdb::ReadOptions(), values, row_key, &stored);
    if (s.IsNotFound()) return LoadResult::kAbsent;
    if (!s.ok()) return fail(s.ToString());
    if (stored.size() != dim * sizeof(float)) return fail("bad size");
    std::memcpy(value, stored.data(), stored.size());
    if (state_dim > 0) {
      stored.Reset();
      s = db->Get(rocksdb::ReadOptions(), states, row_key, &stored);
      if (s.ok() && stored.size() == state_dim * sizeof(float)) {
        std::memcpy(state, stored.data(), stored.size());
      } else if (!s.IsNotFound()) {
        return fail(s.ok() ? "bad optimizer state size" : s.ToString());
      }
    }
    return LoadResult::kFound;
  };
}

void RocksDbEmbeddingStore::ShareShardBudget(TableMap& tables) {
  const uint64_t shard = options_.memory_budget_bytes;
  if (shard == 0) return;
  uint64_t own = 0, sharing = 0;
  for (const auto& [name, table] : tables) {
    const uint64_t budget = table->config().memory_budget_bytes;
    own += budget;
    sharing += budget == 0 ? 1 : 0;
  }
  if (sharing == 0) return;
  const uint64_t share = std::max<uint64_t>(
      kMinMemoryBudgetBytes, shard > own ? (shard - own) / sharing : 0);
  for (auto& [name, table] : tables) table->SetMemoryBudget(share);
}

bool RocksDbEmbeddingStore::AnyBudgetedTableLocked() {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[0]));
  for (it->Seek(kTableRecordPrefix);
       it->Valid() && it->key().starts_with(kTableRecordPrefix); it->Next()) {
    auto record = ParseTableRecord(
        absl::string_view(it->value().data(), it->value().size()));
    if (record.ok() && record->second.memory_budget_bytes > 0) return true;
  }
  return false;
}

absl::Status RocksDbEmbeddingStore::EnablePointReads() {
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  if (skiplist_memtables_) return absl::OkStatus();
  // Buffered rows reach disk first: the reopen loads the tables from it.
  STRATA_RETURN_IF_ERROR(FlushLocked());
  CloseDbLocked();
  skiplist_memtables_ = true;
  STRATA_LOG(INFO, "store") << "reopening with skip-list memtables for a "
                               "table with a memory budget";
  return OpenDbLocked();
}

}  // namespace embedding_internal
}  // namespace strata
