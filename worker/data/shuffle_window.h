#ifndef STRATA_WORKER_DATA_SHUFFLE_WINDOW_H_
#define STRATA_WORKER_DATA_SHUFFLE_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/data/criteo_reader.h"

namespace strata {

// Hands out a CriteoReader's examples in batches, shuffled within
// consecutive windows: it reads `window_examples` examples (fewer at the end
// of an epoch), permutes them and hands them out, then reads the next
// window. Click logs are written in time order, so neighbouring lines share
// users, ads and hours; mixing them makes each batch's gradient less biased.
// The order is a function of the seed, the epoch and the window alone, so a
// rerun (or a resume that skips batches) sees the same batches. Memory:
// the window's examples (about 400 bytes each for single-hot Criteo lines).
// Not thread-safe; borrows the reader.
class ShuffleWindow {
 public:
  // REQUIRES: reader outlives this; window_examples >= 1; batch_size >= 1.
  // `first_epoch` numbers the reader's current epoch (a resumed run's), so
  // that each epoch's order is the same in every run.
  ShuffleWindow(CriteoReader* reader, size_t window_examples, int batch_size,
                uint64_t seed, int first_epoch = 0);
  ShuffleWindow(const ShuffleWindow&) = delete;
  ShuffleWindow& operator=(const ShuffleWindow&) = delete;

  // As CriteoReader::ReadBatch: the next up to batch_size examples; an empty
  // batch at the end of the epoch. The reader's errors.
  absl::Status ReadBatch(Batch* batch);
  // Rewinds the reader for the next epoch (a new order).
  absl::Status StartNextEpoch();

 private:
  // Reads the next window and permutes it; leaves it empty at the end of
  // the epoch.
  absl::Status Refill();

  CriteoReader* const reader_;
  const size_t window_examples_;
  const size_t batch_size_;
  const uint64_t seed_;
  int epoch_ = 0;
  int64_t window_index_ = 0;  // windows read in this epoch
  bool epoch_read_ = false;   // the reader reached the end of the epoch
  Batch window_;
  Batch incoming_;               // the reader's last batch
  size_t incoming_next_ = 0;     // its first example not yet in a window
  std::vector<uint32_t> order_;  // a permutation of window_'s examples
  size_t next_ = 0;              // into order_
};

}  // namespace strata

#endif  // STRATA_WORKER_DATA_SHUFFLE_WINDOW_H_
