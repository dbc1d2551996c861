#ifndef STRATA_WORKER_TRAINING_DENSE_CHECKPOINT_H_
#define STRATA_WORKER_TRAINING_DENSE_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

class FileSystem;

// The worker's half of a training checkpoint: the dense parameters, the
// dense optimizer's state and where training stood, taken at the same
// global step as the PS checkpoint named `ps_checkpoint_id`.
struct DenseCheckpoint {
  int64_t global_step = 0;
  int epoch = 0;                  // epochs finished
  int64_t batches_in_epoch = 0;   // per rank, of the current epoch
  std::string ps_checkpoint_id;   // on every shard
  std::string model_description;  // DescribeModel(); must match to restore
  std::vector<float> parameters;
  std::string optimizer_state;  // DenseOptimizer::SerializeState()
};

// Writes `checkpoint` as <dir>/dense-<global_step>.ckpt (atomically, with a
// checksum) and then points <dir>/LATEST at it.
absl::Status WriteDenseCheckpoint(FileSystem* fs, absl::string_view dir,
                                  const DenseCheckpoint& checkpoint);

// Reads the checkpoint LATEST points at. NOT_FOUND when the directory has
// none; DATA_LOSS naming the file when it is torn or corrupt.
absl::StatusOr<DenseCheckpoint> ReadLatestDenseCheckpoint(
    FileSystem* fs, absl::string_view dir);

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_DENSE_CHECKPOINT_H_
