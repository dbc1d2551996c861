#ifndef STRATA_EMBEDDING_INTERNAL_ROCKSDB_FILES_H_
#define STRATA_EMBEDDING_INTERNAL_ROCKSDB_FILES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"
#include "embedding/embedding_store.h"

namespace strata {
namespace embedding_internal {

// The layout of a store's data_dir:
//   db/                      the live RocksDB database
//   checkpoints/<id>/        a RocksDB checkpoint plus STRATA_CHECKPOINT
//   checkpoints/.staging-<id>/  a checkpoint being written
//   db.restoring/, db.old/   a restore in progress: the copy being made,
//                            and the previous database until the copy opens
// and the moves that keep it consistent across a crash at any point.
// Not thread-safe: the store calls it under its commit lock.
class RocksDbFiles {
 public:
  RocksDbFiles(std::string data_dir, FileSystem* file_system);

  const std::string& db_dir() const { return db_dir_; }

  // Creates the directories and finishes or rolls back a restore that a
  // crash interrupted.
  absl::Status Prepare();

  static absl::Status ValidateCheckpointId(absl::string_view id);
  bool CheckpointExists(absl::string_view id);
  std::string CheckpointStagingDir(absl::string_view id) const;
  // Writes the manifest into `staging_dir` and moves it into place.
  absl::Status PublishCheckpoint(const std::string& staging_dir,
                                 const CheckpointInfo& info);
  absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(absl::string_view id);
  std::vector<std::string> ListCheckpoints();

  // The directory of checkpoint `id` (a RocksDB checkpoint, or a delta's
  // files).
  std::string CheckpointDir(absl::string_view id) const;

  // The checkpoints to apply, in order, to restore `id`: the full checkpoint
  // it builds on, then each delta up to `id`. NOT_FOUND naming a missing
  // link; DATA_LOSS for a cycle.
  absl::StatusOr<std::vector<CheckpointInfo>> RestoreChain(
      absl::string_view id);

  // Restore in three steps. SwapInCheckpoint copies checkpoint `id` (a full
  // one) aside, lets `prepare` change the copy (apply deltas; may be null),
  // then moves db/ aside to db.old/ and puts the copy in its place; then
  // either FinishSwap deletes db.old/ (the copy opened) or RollBackSwap
  // moves it back. A crash before the moves leaves db/ as it was.
  // REQUIRES: db/ is closed during SwapInCheckpoint and RollBackSwap.
  absl::Status SwapInCheckpoint(
      absl::string_view id,
      const std::function<absl::Status(const std::string& copy_dir)>& prepare);
  absl::Status FinishSwap();
  absl::Status RollBackSwap();

 private:
  const std::string data_dir_;
  const std::string db_dir_;
  const std::string checkpoints_dir_;
  FileSystem* const file_system_;
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_ROCKSDB_FILES_H_
