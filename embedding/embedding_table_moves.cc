// EmbeddingTable, what bucket moves need: the rows of some keys read, listed
// and removed without counting as updates or evictions. See
// embedding/embedding_table.h.

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "embedding/embedding_table.h"

namespace strata {

std::vector<FeatureId> EmbeddingTable::SelectKeysOfStripe(
    size_t s, const std::function<bool(FeatureId)>& select) const {
  std::vector<FeatureId> keys;
  if (s >= kNumStripes) return keys;
  const Stripe& stripe = stripes_[s];
  {
    absl::ReaderMutexLock lock(&stripe.mu);
    for (const auto& [key, slot] : stripe.index) {
      if (select(key)) keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

bool EmbeddingTable::ReadRow(FeatureId key, float* value, float* state) const {
  const Stripe& stripe = stripes_[StripeOf(key)];
  absl::ReaderMutexLock lock(&stripe.mu);
  const uint32_t slot = stripe.index.Find(key);
  if (slot == embedding_internal::RowIndex::kAbsent) return false;
  const float* row = stripe.rows.data() + size_t{slot} * row_width_;
  std::memcpy(value, row, config_.dim * sizeof(float));
  if (state_dim() > 0) {
    std::memcpy(state, row + config_.dim, state_dim() * sizeof(float));
  }
  return true;
}

uint64_t EmbeddingTable::RemoveRows(absl::Span<const FeatureId> keys) {
  std::vector<std::vector<FeatureId>> by_stripe(kNumStripes);
  for (FeatureId key : keys) by_stripe[StripeOf(key)].push_back(key);
  uint64_t removed = 0;
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (by_stripe[s].empty()) continue;
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    if (tracks_slots_) {
      // The slots know their keys: each row leaves in constant time.
      for (FeatureId key : by_stripe[s]) {
        if (!stripe.index.Contains(key)) continue;
        DeleteRow(stripe, key);
        ++removed;
      }
      continue;
    }
    removed += CompactWithout(stripe, by_stripe[s]);
  }
  return removed;
}

uint64_t EmbeddingTable::CompactWithout(Stripe& stripe,
                                        absl::Span<const FeatureId> keys) {
  const absl::flat_hash_set<FeatureId> gone(keys.begin(), keys.end());
  embedding_internal::RowIndex index;
  decltype(stripe.rows) rows;
  index.Reserve(stripe.index.size());
  rows.reserve(stripe.rows.size());
  uint64_t removed = 0;
  for (const auto& [key, slot] : stripe.index) {
    if (gone.contains(key)) {
      ++removed;
      continue;
    }
    const float* row = stripe.rows.data() + size_t{slot} * row_width_;
    index.Set(key, static_cast<uint32_t>(rows.size() / row_width_));
    // Its place in dirty_keys stays valid.
    if (stripe.index.IsDirty(key)) index.MarkDirty(key);
    rows.insert(rows.end(), row, row + row_width_);
  }
  if (removed == 0) return 0;
  stripe.index = std::move(index);
  stripe.rows = std::move(rows);
  return removed;
}

void EmbeddingTable::ForgetColdRows(uint64_t count) {
  cold_rows_.fetch_sub(static_cast<int64_t>(count), std::memory_order_relaxed);
}

}  // namespace strata
