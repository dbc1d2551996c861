#ifndef STRATA_EMBEDDING_INTERNAL_CHECKPOINT_DELTA_H_
#define STRATA_EMBEDDING_INTERNAL_CHECKPOINT_DELTA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace strata {
namespace embedding_internal {

// The row keys written to the store since its last checkpoint: what an
// incremental checkpoint must carry. Fed with every write batch the store
// commits, so pushes, flushes and deletions are all seen at one place.
// Tracking starts at a checkpoint or restore (before the first one a delta
// has no base). Thread-safe.
class ChangedRowTracker {
 public:
  ChangedRowTracker() = default;
  ChangedRowTracker(const ChangedRowTracker&) = delete;
  ChangedRowTracker& operator=(const ChangedRowTracker&) = delete;

  // Forgets the keys seen so far and tracks from now on, with the
  // checkpoint `base_id` as the base of the next delta.
  void Restart(const std::string& base_id);
  // The checkpoint the next delta builds on; empty when not tracking.
  std::string base_id() const;

  // Records the keys `batch` writes or deletes in the column family
  // `values_family_id` (the rows' values; their optimizer state is written
  // alongside).
  void Record(const rocksdb::WriteBatch& batch, uint32_t values_family_id);

  // The recorded row keys, sorted bytewise (the order of an SST file).
  std::vector<std::string> SortedKeys() const;
  // More rows changed than it keeps (kMaxTrackedRows): a delta would be
  // incomplete, so the next checkpoint must be full.
  bool overflowed() const;

  // About 24 bytes each; past this many, tracking stops until Restart.
  static constexpr size_t kMaxTrackedRows = size_t{16} << 20;

 private:
  mutable absl::Mutex mu_;
  std::string base_id_ ABSL_GUARDED_BY(mu_);
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  // (table id, feature id) of each row key: a fixed size, unlike the keys.
  absl::flat_hash_set<std::pair<uint32_t, uint64_t>> rows_ ABSL_GUARDED_BY(mu_);
};

// The column families of a store, in the order of its handles: "default"
// (tables, push windows), "values", "optimizer".
inline constexpr int kNumFamilies = 3;
inline constexpr const char* kFamilyNames[kNumFamilies] = {"default", "values",
                                                           "optimizer"};

// "<what>: <status>" as DATA_LOSS for a corruption, INTERNAL otherwise.
absl::Status RocksError(absl::string_view what, const rocksdb::Status& s);

// Writes the delta of `row_keys` (sorted) into `dir`: one SST file per
// column family, holding every record of "default" and, for each row key,
// the row's value and optimizer state as the database has them, or a
// deletion when the row is gone. An empty family gets no file. Flushes the
// memtables first.
// REQUIRES: no write reaches `db` meanwhile.
absl::Status WriteDelta(
    rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles,
    const std::vector<std::string>& row_keys, const std::string& dir);

// Applies the deltas in `dirs` (from WriteDelta), in order, to the closed
// database in `db_dir`: opens it, ingests each delta's files (copies, with
// their checksums verified) and closes it. DATA_LOSS when a file is corrupt.
absl::Status ApplyDeltas(const std::string& db_dir,
                         const std::vector<std::string>& dirs);

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_CHECKPOINT_DELTA_H_
