// EmbeddingStore on RocksDB, eviction: the background sweep that deletes
// the rows tables' eviction policies select, from memory, from disk and
// (through the change log) from followers. See
// embedding/internal/rocksdb_embedding_store.h.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"

namespace strata {
namespace embedding_internal {

absl::StatusOr<uint64_t> RocksDbEmbeddingStore::EvictNow() {
  absl::MutexLock sweep_lock(&evict_mu_);
  std::vector<std::string> names;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& [name, table] : tables_) {
      if (Evicts(table->config().eviction)) names.push_back(name);
    }
  }
  uint64_t evicted = 0;
  for (const std::string& name : names) {
    for (size_t s = 0; s < EmbeddingTable::num_stripes(); ++s) {
      // The scan holds the stripe's lock shared only: pulls go on, and
      // pushes are not held up by commit_mu_.
      std::vector<FeatureId> candidates;
      {
        absl::ReaderMutexLock lock(&tables_mu_);
        EmbeddingTable* table = FindTable(name);
        if (table == nullptr) break;  // Replaced by a restore.
        candidates = table->EvictionCandidates(s);
      }
      if (candidates.empty()) continue;
      STRATA_ASSIGN_OR_RETURN(uint64_t n, EvictStripe(name, s, candidates));
      evicted += n;
    }
  }
  if (evicted > 0) {
    STRATA_LOG(INFO, "store") << "evicted " << evicted << " rows";
  }
  return evicted;
}

absl::StatusOr<uint64_t> RocksDbEmbeddingStore::EvictStripe(
    const std::string& name, size_t stripe,
    absl::Span<const FeatureId> candidates) {
  // Exclusive in every durability mode, so that no push is between applying
  // its rows and logging them: a key pushed again after its deletion is
  // logged after the deletion, and followers end with the row. flush_mu_
  // keeps a flush cut taken before the deletion from writing the rows back.
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  absl::ReaderMutexLock lock(&tables_mu_);
  EmbeddingTable* table = FindTable(name);
  if (table == nullptr) return 0;
  DeletedRows deleted{name, {}};
  rocksdb::WriteBatch write;
  rocksdb::ColumnFamilyHandle* const values = handles_[1];
  rocksdb::ColumnFamilyHandle* const states = handles_[2];
  table->EvictRows(stripe, candidates, [&](FeatureId key) {
    deleted.keys.push_back(key);
    const std::string row_key = RowKey(table->id(), key);
    write.Delete(values, row_key);
    write.Delete(states, row_key);
  });
  if (deleted.keys.empty()) return 0;
  const uint64_t count = deleted.keys.size();
  // Written before it is logged, so that a deletion whose write failed
  // reaches no follower. Not synced (nor in kSync mode, where the next
  // push's fsync publishes it): a deletion lost in a crash only brings rows
  // back, and the next sweep deletes them again.
  STRATA_RETURN_IF_ERROR(WriteLocked(write, /*sync=*/false));
  change_log_.Append([&deleted](ChangeRecord& record) {
    record.deleted.push_back(std::move(deleted));
  });
  return count;
}

absl::StatusOr<uint64_t> RocksDbEmbeddingStore::ExpirePushWindows() {
  // flush_mu_: a flush cut taken before the expiry does not write an
  // expired window back.
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  const std::vector<std::string> expired =
      deduplicator_.Expire(options_.push_window_ttl, options_.max_push_windows);
  if (expired.empty()) return 0;
  rocksdb::WriteBatch write;
  for (const std::string& client : expired) {
    write.Delete(handles_[0], absl::StrCat(kClientPrefix, client));
  }
  // Not synced: a deletion lost in a crash only brings a window back until
  // the next sweep.
  STRATA_RETURN_IF_ERROR(WriteLocked(write, /*sync=*/false));
  STRATA_LOG(INFO, "store")
      << "forgot the push windows of " << expired.size() << " idle clients";
  return expired.size();
}

void RocksDbEmbeddingStore::EvictionLoop() {
  while (!stop_evictor_.WaitForNotificationWithTimeout(
      options_.eviction_interval)) {
    absl::StatusOr<uint64_t> evicted = EvictNow();
    if (!evicted.ok()) {
      STRATA_LOG(ERROR, "store") << "eviction failed: " << evicted.status();
    }
    absl::StatusOr<uint64_t> expired = ExpirePushWindows();
    if (!expired.ok()) {
      STRATA_LOG(ERROR, "store")
          << "expiring push windows failed: " << expired.status();
    }
  }
}

}  // namespace embedding_internal
}  // namespace strata
