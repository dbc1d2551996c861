#include "embedding/embedding_table.h"

#include <cstring>

#include "common/hash.h"

namespace strata {

EmbeddingTable::EmbeddingTable(const EmbeddingTableConfig& config, TableId id)
    : config_(config),
      id_(id),
      initializer_(config.initializer, config.seed),
      optimizer_(Optimizer::Create(config.optimizer, config.dim)),
      row_width_(config.dim + optimizer_->state_dim()),
      stripes_(new Stripe[kNumStripes]) {}

size_t EmbeddingTable::StripeOf(FeatureId key) {
  return static_cast<size_t>(Mix64(key) >> (64 - kStripeBits));
}

void EmbeddingTable::GroupByStripe(absl::Span<const FeatureId> keys,
                                   std::vector<uint32_t>& order,
                                   std::vector<uint32_t>& starts) {
  // A counting sort: two passes over the keys, no comparisons.
  starts.assign(kNumStripes + 1, 0);
  std::vector<uint8_t> stripe_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    stripe_of[i] = static_cast<uint8_t>(StripeOf(keys[i]));
    ++starts[stripe_of[i] + 1];
  }
  for (size_t s = 0; s < kNumStripes; ++s) starts[s + 1] += starts[s];
  std::vector<uint32_t> next(starts.begin(), starts.end() - 1);
  order.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    order[next[stripe_of[i]]++] = static_cast<uint32_t>(i);
  }
}

void EmbeddingTable::Lookup(absl::Span<const FeatureId> keys,
                            float* out) const {
  const uint32_t dim = config_.dim;
  const size_t row_bytes = dim * sizeof(float);
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, order, starts);
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (starts[s] == starts[s + 1]) continue;
    const Stripe& stripe = stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    // Prefetch a few keys ahead: the index probes are cache misses on large
    // tables.
    constexpr uint32_t kPrefetchDistance = 8;
    for (uint32_t j = starts[s]; j < starts[s + 1]; ++j) {
      if (j + kPrefetchDistance < starts[s + 1]) {
        stripe.index.prefetch(keys[order[j + kPrefetchDistance]]);
      }
      const uint32_t i = order[j];
      float* target = out + static_cast<size_t>(i) * dim;
      auto it = stripe.index.find(keys[i]);
      if (it == stripe.index.end()) {
        initializer_.Fill(keys[i], dim, target);
      } else {
        std::memcpy(target,
                    stripe.rows.data() + size_t{it->second} * row_width_,
                    row_bytes);
      }
    }
  }
}

float* EmbeddingTable::FindOrCreateRow(Stripe& stripe, FeatureId key) {
  auto [it, inserted] = stripe.index.try_emplace(key, 0);
  if (inserted) {
    const size_t slot = stripe.rows.size() / row_width_;
    it->second = static_cast<uint32_t>(slot);
    stripe.rows.resize(stripe.rows.size() + row_width_);
    float* row = stripe.rows.data() + slot * row_width_;
    initializer_.Fill(key, config_.dim, row);
    optimizer_->InitState(row + config_.dim);
    return row;
  }
  return stripe.rows.data() + size_t{it->second} * row_width_;
}

void EmbeddingTable::ApplyGradients(absl::Span<const FeatureId> keys,
                                    const float* gradients, bool track_dirty,
                                    const RowVisitor& on_updated) {
  const uint32_t dim = config_.dim;
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, order, starts);
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    for (uint32_t j = starts[s]; j < starts[s + 1]; ++j) {
      const uint32_t i = order[j];
      float* row = FindOrCreateRow(stripe, keys[i]);
      optimizer_->Apply(gradients + static_cast<size_t>(i) * dim, row,
                        row + dim);
      if (track_dirty) stripe.dirty.insert(keys[i]);
      if (on_updated) on_updated(keys[i], row, row + dim);
    }
  }
}

void EmbeddingTable::PutRow(FeatureId key, const float* value,
                            const float* state) {
  Stripe& stripe = stripes_[StripeOf(key)];
  absl::MutexLock lock(&stripe.mu);
  float* row = FindOrCreateRow(stripe, key);
  std::memcpy(row, value, config_.dim * sizeof(float));
  if (state_dim() > 0) {
    std::memcpy(row + config_.dim, state, state_dim() * sizeof(float));
  }
}

void EmbeddingTable::TakeDirtyRows(const RowVisitor& visitor) {
  for (size_t s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    for (FeatureId key : stripe.dirty) {
      const float* row =
          stripe.rows.data() + size_t{stripe.index.at(key)} * row_width_;
      visitor(key, row, row + config_.dim);
    }
    stripe.dirty.clear();
  }
}

void EmbeddingTable::ForEachRow(const RowVisitor& visitor) const {
  for (size_t s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    for (const auto& [key, slot] : stripe.index) {
      const float* row = stripe.rows.data() + size_t{slot} * row_width_;
      visitor(key, row, row + config_.dim);
    }
  }
}

uint64_t EmbeddingTable::num_rows() const {
  uint64_t rows = 0;
  for (size_t s = 0; s < kNumStripes; ++s) {
    absl::ReaderMutexLock lock(&stripes_[s].mu);
    rows += stripes_[s].index.size();
  }
  return rows;
}

uint64_t EmbeddingTable::memory_bytes() const {
  uint64_t bytes = 0;
  for (size_t s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    bytes += stripe.rows.capacity() * sizeof(float);
    // A flat_hash_map slot holds the pair plus one control byte.
    bytes +=
        stripe.index.capacity() * (sizeof(std::pair<FeatureId, uint32_t>) + 1);
    bytes += stripe.dirty.capacity() * (sizeof(FeatureId) + 1);
  }
  return bytes;
}

}  // namespace strata
