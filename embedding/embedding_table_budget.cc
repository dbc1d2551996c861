// EmbeddingTable with a memory budget: which rows stay in memory, and how the
// others come back from disk. See embedding/embedding_table.h.

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "embedding/embedding_table.h"

namespace strata {

namespace {

// Reallocates `v` to hold `capacity` elements (at least its size), giving
// back what growth past it took.
template <typename T, typename Allocator>
void SetCapacity(std::vector<T, Allocator>& v, size_t capacity) {
  std::vector<T, Allocator> resized;
  resized.reserve(std::max(capacity, v.size()));
  resized.assign(v.begin(), v.end());
  v.swap(resized);
}

}  // namespace

uint32_t EmbeddingTable::StripeRowCap(uint64_t bytes) const {
  if (bytes == 0) return 0;
  // What a full stripe holds, as memory_bytes() counts it: the rows, their
  // keys, reference bits and eviction stamps, and the index.
  auto stripe_bytes = [this](uint64_t rows) {
    const uint64_t per_row = uint64_t{row_width_} * sizeof(float) +
                             sizeof(FeatureId) + 1 +
                             (evicts_ ? sizeof(RowStamp) : 0);
    const uint64_t index = embedding_internal::RowIndex::BytesFor(rows);
    return rows * per_row + index;
  };
  const uint64_t budget = bytes / kNumStripes;
  uint64_t low = 1, high = budget;  // the largest count that fits
  while (low < high) {
    const uint64_t mid = low + (high - low + 1) / 2;
    if (stripe_bytes(mid) <= budget) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return static_cast<uint32_t>(std::min<uint64_t>(low, UINT32_MAX / 2));
}

float* EmbeddingTable::LoadRow(Stripe& stripe, FeatureId key,
                               const RowLoader& loader, bool* failed) {
  std::vector<float> row(row_width_);
  optimizer_->InitState(row.data() + config_.dim);
  const LoadResult loaded = loader(key, row.data(), row.data() + config_.dim);
  *failed = loaded == LoadResult::kFailed;
  if (loaded != LoadResult::kFound) return nullptr;
  float* slot = NewSlot(stripe, key);
  std::memcpy(slot, row.data(), row.size() * sizeof(float));
  cold_rows_.fetch_sub(1, std::memory_order_relaxed);
  return slot;
}

void EmbeddingTable::ShrinkTo(Stripe& stripe, uint32_t rows) {
  uint32_t slots = static_cast<uint32_t>(stripe.keys.size());
  // Two turns of the hand clear every reference bit; pinned rows and rows
  // still to be written to disk (periodic durability) stay, so a stripe may
  // stay over budget until the next flush.
  uint64_t steps_left = 2 * uint64_t{slots} + 1;
  while (slots > rows && steps_left-- > 0) {
    if (stripe.clock_hand >= slots) stripe.clock_hand = 0;
    const uint32_t slot = stripe.clock_hand;
    if (stripe.referenced[slot] == kReferenced) {
      stripe.referenced[slot] = kUnreferenced;
      ++stripe.clock_hand;
      continue;
    }
    const FeatureId key = stripe.keys[slot];
    if (stripe.referenced[slot] == kPinned || stripe.index.IsDirty(key)) {
      ++stripe.clock_hand;
      continue;
    }
    // Its latest value is on disk: it leaves memory only. The last row moves
    // into this slot, which the hand looks at next.
    DeleteRow(stripe, key);
    cold_rows_.fetch_add(1, std::memory_order_relaxed);
    --slots;
  }
}

void EmbeddingTable::SetMemoryBudget(uint64_t bytes) {
  if (!budgeted_ || config_.memory_budget_bytes > 0) return;
  stripe_row_cap_.store(StripeRowCap(bytes), std::memory_order_relaxed);
}

void EmbeddingTable::ShrinkToBudget() {
  const uint32_t cap_rows = cap();
  if (cap_rows == 0) return;
  for (size_t s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    ShrinkTo(stripe, cap_rows);
    // The list of rows to write keeps its capacity when cleared.
    if (stripe.index.dirty_count() == 0) {
      std::vector<FeatureId>().swap(stripe.dirty_keys);
    }
    // Rows kept over the budget until this flush grew the containers: give
    // the memory back once they fit again.
    const size_t rows = stripe.keys.size();
    if (rows > cap_rows ||
        stripe.rows.capacity() <= size_t{cap_rows} * row_width_) {
      continue;
    }
    SetCapacity(stripe.rows, size_t{cap_rows} * row_width_);
    SetCapacity(stripe.keys, cap_rows);
    SetCapacity(stripe.referenced, cap_rows);
    if (evicts_) SetCapacity(stripe.stamps, cap_rows);
    stripe.index.ShrinkTo(cap_rows);
  }
}

}  // namespace strata
