#ifndef STRATA_WORKER_TRAINING_TENSORBOARD_EVENTS_H_
#define STRATA_WORKER_TRAINING_TENSORBOARD_EVENTS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// strata-worker's --tensorboard_dir: scalars (loss, samples/s, held-out AUC
// and log loss) in a TensorBoard event file, so that `tensorboard --logdir`
// draws a run as it draws a TensorFlow or PyTorch job's.
//
// The file, events.out.tfevents.<unix seconds>.strata-worker in the
// folder, is what TensorFlow's summary writers write: TFRecord framing
// (length, masked CRC-32C of the length, the record, its masked CRC-32C)
// around serialized tensorflow.Event messages, the first holding
// file_version "brain.Event:2", each later one a step's Summary of
// simple_value scalars. The few message fields are encoded here by hand (no
// TensorFlow dependency). Each event is flushed as it is written. Not
// thread-safe.
class TensorBoardEvents {
 public:
  // Creates `dir` (and its parents) when missing and a new event file in
  // it. An error names the path.
  static absl::StatusOr<std::unique_ptr<TensorBoardEvents>> Open(
      const std::string& dir, double wall_time);
  ~TensorBoardEvents();
  TensorBoardEvents(const TensorBoardEvents&) = delete;
  TensorBoardEvents& operator=(const TensorBoardEvents&) = delete;

  // One event of `step` at `wall_time` (seconds since the Unix epoch)
  // holding each (tag, value). An error names the file.
  absl::Status AddScalars(
      int64_t step, double wall_time,
      const std::vector<std::pair<std::string, float>>& scalars);

  const std::string& path() const { return path_; }

 private:
  TensorBoardEvents(std::FILE* file, std::string path)
      : file_(file), path_(std::move(path)) {}
  absl::Status WriteRecord(absl::string_view record);

  std::FILE* file_;
  std::string path_;
};

// The pieces of the format, for tests: a serialized tensorflow.Event of
// scalars, the TFRecord frame of a record, and the masked CRC-32C.
std::string ScalarEvent(
    int64_t step, double wall_time,
    const std::vector<std::pair<std::string, float>>& scalars);
std::string TfRecordFrame(absl::string_view record);
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_TENSORBOARD_EVENTS_H_
