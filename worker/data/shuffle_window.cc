#include "worker/data/shuffle_window.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Keys a window may hold: Batch offsets are 32-bit.
constexpr size_t kMaxWindowKeys = size_t{1} << 31;

}  // namespace

ShuffleWindow::ShuffleWindow(CriteoReader* reader, size_t window_examples,
                             int batch_size, uint64_t seed, int first_epoch)
    : reader_(reader),
      window_examples_(std::max<size_t>(window_examples, 1)),
      batch_size_(static_cast<size_t>(std::max(batch_size, 1))),
      seed_(seed),
      epoch_(first_epoch) {}

absl::Status ShuffleWindow::Refill() {
  window_.Clear();
  order_.clear();
  next_ = 0;
  while (window_.size() < window_examples_ &&
         window_.keys.size() < kMaxWindowKeys) {
    if (incoming_next_ == incoming_.size()) {
      if (epoch_read_) break;
      STRATA_RETURN_IF_ERROR(reader_->ReadBatch(&incoming_));
      incoming_next_ = 0;
      if (incoming_.size() == 0) {
        epoch_read_ = true;
        break;
      }
    }
    // Exactly window_examples_: the rest of the reader's batch starts the
    // next window.
    const size_t take = std::min(incoming_.size() - incoming_next_,
                                 window_examples_ - window_.size());
    window_.AppendRange(incoming_, incoming_next_, incoming_next_ + take);
    incoming_next_ += take;
  }
  order_.resize(window_.size());
  std::iota(order_.begin(), order_.end(), 0u);
  std::mt19937_64 random(
      Mix64(seed_ ^ Mix64(static_cast<uint64_t>(epoch_) << 32 ^
                          static_cast<uint64_t>(window_index_))));
  std::shuffle(order_.begin(), order_.end(), random);
  ++window_index_;
  return absl::OkStatus();
}

absl::Status ShuffleWindow::ReadBatch(Batch* batch) {
  batch->Clear();
  if (next_ == order_.size()) STRATA_RETURN_IF_ERROR(Refill());
  const size_t end = std::min(order_.size(), next_ + batch_size_);
  for (; next_ < end; ++next_) {
    batch->AppendRange(window_, order_[next_], order_[next_] + 1);
  }
  return absl::OkStatus();
}

absl::Status ShuffleWindow::StartNextEpoch() {
  STRATA_RETURN_IF_ERROR(reader_->StartNextEpoch());
  ++epoch_;
  window_index_ = 0;
  epoch_read_ = false;
  incoming_.Clear();
  incoming_next_ = 0;
  window_.Clear();
  order_.clear();
  next_ = 0;
  return absl::OkStatus();
}

}  // namespace strata
