#include "embedding/embedding_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "common/hash.h"
#include "common/prefetch.h"
#include "embedding/internal/feature_admission.h"

namespace strata {

EmbeddingTable::EmbeddingTable(const EmbeddingTableConfig& config, TableId id,
                               Clock* clock, bool shard_budget)
    : config_(config),
      id_(id),
      clock_(clock),
      evicts_(Evicts(config.eviction)),
      initializer_(config.initializer, config.seed),
      optimizer_(Optimizer::Create(config.optimizer, config.dim)),
      row_width_(config.dim + optimizer_->state_dim()),
      budgeted_(config.memory_budget_bytes > 0 || shard_budget),
      stripe_row_cap_(StripeRowCap(config.memory_budget_bytes)),
      tracks_slots_(evicts_ || budgeted_),
      stripes_(new Stripe[kNumStripes]),
      admission_(CountsSightings(config.admission)
                     ? std::make_unique<embedding_internal::FeatureAdmission>(
                           config.admission, config.seed)
                     : nullptr) {}

EmbeddingTable::~EmbeddingTable() = default;

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
  Lookup(keys, out, nullptr);
}

void EmbeddingTable::InitialValue(FeatureId key, float* out) const {
  initializer_.Fill(key, config_.dim, out);
}

void EmbeddingTable::Lookup(absl::Span<const FeatureId> keys, float* out,
                            std::vector<uint32_t>* misses) const {
  const uint32_t dim = config_.dim;
  const size_t row_bytes = dim * sizeof(float);
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, order, starts);
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (starts[s] == starts[s + 1]) continue;
    const Stripe& stripe = stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    // A pipeline: key j + kIndexPrefetchAhead's probe is prefetched, key
    // j + kRowPrefetchAhead is found and its row prefetched, and key j's
    // row, found kRowPrefetchAhead keys ago, is copied.
    constexpr uint32_t kRing = kRowPrefetchAhead;
    const uint32_t begin = starts[s];
    const uint32_t end = starts[s + 1];
    const float* found[kRing];  // The row of key j, or null, at j % kRing.
    for (uint32_t j = begin; j < std::min(end, begin + kIndexPrefetchAhead);
         ++j) {
      stripe.index.Prefetch(keys[order[j]]);
    }
    for (uint32_t j = begin; j < std::min(end, begin + kRing); ++j) {
      found[(j - begin) % kRing] =
          FindAndPrefetchRow(stripe, keys[order[j]], /*for_update=*/false);
    }
    for (uint32_t j = begin; j < end; ++j) {
      if (j + kIndexPrefetchAhead < end) {
        stripe.index.Prefetch(keys[order[j + kIndexPrefetchAhead]]);
      }
      const float* row = found[(j - begin) % kRing];
      if (j + kRing < end) {
        found[(j - begin) % kRing] = FindAndPrefetchRow(
            stripe, keys[order[j + kRing]], /*for_update=*/false);
      }
      const uint32_t i = order[j];
      float* target = out + static_cast<size_t>(i) * dim;
      if (row != nullptr) {
        std::memcpy(target, row, row_bytes);
      } else if (misses != nullptr) {
        misses->push_back(i);
      } else {
        initializer_.Fill(keys[i], dim, target);
      }
    }
  }
}

float* EmbeddingTable::NewSlot(Stripe& stripe, FeatureId key) {
  if (const uint32_t rows = cap(); rows > 0 && stripe.index.size() >= rows) {
    ShrinkTo(stripe, rows - 1);  // room for this row
  }
  if (const uint32_t rows = cap(); rows > 0) ReserveWithinBudget(stripe, rows);
  const size_t slot = stripe.rows.size() / row_width_;
  stripe.index.Set(key, static_cast<uint32_t>(slot));
  stripe.rows.resize(stripe.rows.size() + row_width_);
  if (tracks_slots_) stripe.keys.push_back(key);
  if (evicts_) stripe.stamps.emplace_back();
  if (budgeted_) stripe.referenced.push_back(kPinned);
  return stripe.rows.data() + slot * row_width_;
}

void EmbeddingTable::ReserveWithinBudget(Stripe& stripe, uint32_t rows) {
  const size_t slots = stripe.keys.size();
  if (slots >= rows || slots < stripe.keys.capacity()) return;
  // Doubling, but never past the budget's row count (doubling alone would
  // overshoot it), and never sized by the budget up front: a budget near
  // the machine's memory must cost only what the rows use.
  const size_t next = std::min<size_t>(rows, std::max<size_t>(2 * slots, 16));
  stripe.rows.reserve(next * row_width_);
  stripe.index.Reserve(next);
  stripe.keys.reserve(next);
  stripe.referenced.reserve(next);
  if (evicts_) stripe.stamps.reserve(next);
}

float* EmbeddingTable::FindOrCreateRow(Stripe& stripe, FeatureId key) {
  if (const uint32_t slot = stripe.index.Find(key);
      slot != embedding_internal::RowIndex::kAbsent) {
    return stripe.rows.data() + size_t{slot} * row_width_;
  }
  float* row = NewSlot(stripe, key);
  initializer_.Fill(key, config_.dim, row);
  optimizer_->InitState(row + config_.dim);
  return row;
}

float* EmbeddingTable::FindOrAdmitRow(Stripe& stripe, FeatureId key,
                                      const RowLoader& loader) {
  if (const uint32_t slot = stripe.index.Find(key);
      slot != embedding_internal::RowIndex::kAbsent) {
    if (budgeted_) stripe.referenced[slot] = kPinned;
    return stripe.rows.data() + size_t{slot} * row_width_;
  }
  if (loader) {
    bool failed = false;
    if (float* row = LoadRow(stripe, key, loader, &failed)) return row;
    if (failed) return nullptr;
  }
  if (admission_ != nullptr && !admission_->Admit(key)) {
    rejected_gradients_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  admitted_keys_.fetch_add(1, std::memory_order_relaxed);
  return FindOrCreateRow(stripe, key);
}

void EmbeddingTable::ApplyGradients(absl::Span<const FeatureId> keys,
                                    const float* gradients, bool track_dirty,
                                    const RowVisitor& on_updated,
                                    uint64_t global_step,
                                    const RowLoader& loader) {
  const uint32_t dim = config_.dim;
  NoteStep(global_step);
  const RowStamp stamp{global_step,
                       evicts_ ? absl::ToUnixMicros(clock_->Now()) : 0};
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, order, starts);
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    // Probes and rows prefetched ahead, as in Lookup; a row created
    // meanwhile may move the rows, and a stale prefetch is only a wasted
    // hint.
    const uint32_t begin = starts[s];
    const uint32_t end = starts[s + 1];
    const auto key_at = [&](size_t k) { return keys[order[k]]; };
    for (uint32_t j = begin; j < end; ++j) {
      PrefetchForUpdateAhead(stripe, j, begin, end, key_at);
      const uint32_t i = order[j];
      float* row = FindOrAdmitRow(stripe, keys[i], loader);
      if (row == nullptr) continue;
      optimizer_->Apply(gradients + static_cast<size_t>(i) * dim, row,
                        row + dim);
      if (evicts_) {
        stripe.stamps[(row - stripe.rows.data()) / row_width_] = stamp;
      }
      if (track_dirty) MarkDirtyLocked(stripe, keys[i]);
      if (on_updated) on_updated(keys[i], row, row + dim);
    }
    if (budgeted_) {
      UnpinLocked(stripe, keys,
                  absl::MakeConstSpan(order).subspan(
                      starts[s], starts[s + 1] - starts[s]));
    }
  }
}

const float* EmbeddingTable::FindAndPrefetchRow(const Stripe& stripe,
                                                FeatureId key,
                                                bool for_update) const {
  const uint32_t slot = stripe.index.Find(key);
  if (slot == embedding_internal::RowIndex::kAbsent) return nullptr;
  const float* row = stripe.rows.data() + size_t{slot} * row_width_;
  const char* bytes = reinterpret_cast<const char*>(row);
  constexpr size_t kCacheLine = 64;
  const size_t floats = for_update ? row_width_ : config_.dim;
  for (size_t line = 0; line < floats * sizeof(float); line += kCacheLine) {
    PrefetchLine(bytes + line);
  }
  return row;
}

void EmbeddingTable::UnpinLocked(Stripe& stripe,
                                 absl::Span<const FeatureId> keys,
                                 absl::Span<const uint32_t> positions) {
  for (uint32_t i : positions) {
    const uint32_t slot = stripe.index.Find(keys[i]);
    if (slot != embedding_internal::RowIndex::kAbsent &&
        stripe.referenced[slot] == kPinned) {
      stripe.referenced[slot] = kReferenced;
    }
  }
}

void EmbeddingTable::PutRow(FeatureId key, const float* value,
                            const float* state) {
  Stripe& stripe = stripes_[StripeOf(key)];
  absl::MutexLock lock(&stripe.mu);
  if (const uint32_t rows = cap();
      rows > 0 && !stripe.index.Contains(key) && stripe.index.size() >= rows) {
    cold_rows_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  float* row = FindOrCreateRow(stripe, key);
  if (budgeted_) {
    stripe.referenced[(row - stripe.rows.data()) / row_width_] = kUnreferenced;
  }
  if (evicts_) {
    stripe.stamps[(row - stripe.rows.data()) / row_width_] =
        RowStamp{0, absl::ToUnixMicros(clock_->Now())};
  }
  std::memcpy(row, value, config_.dim * sizeof(float));
  if (state_dim() > 0) {
    std::memcpy(row + config_.dim, state, state_dim() * sizeof(float));
  }
}

void EmbeddingTable::TakeDirtyRows(const RowVisitor& visitor) {
  // The rows are visited in key order, the order of their keys in RocksDB:
  // the store's vector memtable sorts its entries when it is flushed, and a
  // sort of entries in hash order made every comparison a cache miss (a
  // third of a training shard's CPU); entries already in order cost it a
  // sequential pass.
  std::vector<FeatureId> keys;
  keys.reserve(num_dirty_rows());
  for (size_t s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    const size_t count = stripe.dirty_keys.size();
    for (size_t j = 0; j < count; ++j) {
      if (j + kIndexPrefetchAhead < count) {
        stripe.index.Prefetch(stripe.dirty_keys[j + kIndexPrefetchAhead]);
      }
      const FeatureId key = stripe.dirty_keys[j];
      if (stripe.index.ClearDirty(key)) keys.push_back(key);
    }
    // Kept for the next flush's marks (growing it again costs more), but
    // not a peak's room that this flush needed less than half of (after a
    // restore or a burst of new keys).
    stripe.dirty_keys.clear();
    if (stripe.dirty_keys.capacity() > 2 * count + kDirtyListSlack) {
      stripe.dirty_keys.shrink_to_fit();
    }
  }
  std::sort(keys.begin(), keys.end());
  // Every stripe is held shared while the rows are read: pulls go on, and
  // no row moves. (Nothing holds one stripe's lock while taking another's,
  // so taking all of them in order cannot deadlock.)
  std::array<std::optional<absl::ReaderMutexLock>, kNumStripes> locks;
  for (size_t s = 0; s < kNumStripes; ++s) locks[s].emplace(&stripes_[s].mu);
  // Consecutive keys sit in unrelated stripes and rows, so each probe and
  // row is fetched ahead, as pushes do: step j prefetches the probe of key
  // j, finds and prefetches the row of key j - kRowLag and visits the row
  // of key j - kVisitLag.
  constexpr size_t kVisitLag = kIndexPrefetchAhead;
  constexpr size_t kRowLag = kIndexPrefetchAhead - kRowPrefetchAhead;
  const size_t n = keys.size();
  for (size_t j = 0; j < n + kVisitLag; ++j) {
    if (j < n) {
      const Stripe& stripe = stripes_[StripeOf(keys[j])];
      stripe.mu.AssertReaderHeld();
      stripe.index.Prefetch(keys[j]);
    }
    if (j >= kRowLag && j - kRowLag < n) {
      const FeatureId key = keys[j - kRowLag];
      const Stripe& stripe = stripes_[StripeOf(key)];
      stripe.mu.AssertReaderHeld();
      FindAndPrefetchRow(stripe, key, /*for_update=*/true);
    }
    if (j < kVisitLag) continue;
    const FeatureId key = keys[j - kVisitLag];
    const Stripe& stripe = stripes_[StripeOf(key)];
    stripe.mu.AssertReaderHeld();
    // A row deleted since its dirty mark was taken (a bucket moved away)
    // has nothing left to write.
    const uint32_t slot = stripe.index.Find(key);
    if (slot == embedding_internal::RowIndex::kAbsent) continue;
    const float* row = stripe.rows.data() + size_t{slot} * row_width_;
    visitor(key, row, row + config_.dim);
  }
}

size_t EmbeddingTable::num_dirty_rows() const {
  size_t rows = 0;
  for (size_t s = 0; s < kNumStripes; ++s) {
    absl::ReaderMutexLock lock(&stripes_[s].mu);
    rows += stripes_[s].index.dirty_count();
  }
  return rows;
}

void EmbeddingTable::MarkDirty(absl::Span<const FeatureId> keys) {
  for (FeatureId key : keys) {
    Stripe& stripe = stripes_[StripeOf(key)];
    absl::MutexLock lock(&stripe.mu);
    if (stripe.index.Contains(key)) MarkDirtyLocked(stripe, key);
  }
}

void EmbeddingTable::MarkDirtyLocked(Stripe& stripe, FeatureId key) {
  if (!stripe.index.MarkDirty(key)) return;
  stripe.dirty_keys.push_back(key);
  // Deleted rows leave their keys behind; once those outnumber the marked
  // ones, the list keeps each marked key once (ClearDirty is true only at
  // a key's first occurrence), which bounds it by twice the marks.
  if (stripe.dirty_keys.size() <=
      2 * stripe.index.dirty_count() + kDirtyListSlack) {
    return;
  }
  size_t kept = 0;
  for (FeatureId marked : stripe.dirty_keys) {
    if (stripe.index.ClearDirty(marked)) stripe.dirty_keys[kept++] = marked;
  }
  stripe.dirty_keys.resize(kept);
  for (FeatureId marked : stripe.dirty_keys) stripe.index.MarkDirty(marked);
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

void EmbeddingTable::NoteStep(uint64_t global_step) {
  if (global_step == 0) return;
  uint64_t expected = 0;
  first_step_.compare_exchange_strong(expected, global_step,
                                      std::memory_order_relaxed);
  uint64_t latest = latest_step_.load(std::memory_order_relaxed);
  while (latest < global_step &&
         !latest_step_.compare_exchange_weak(latest, global_step,
                                             std::memory_order_relaxed)) {
  }
}

bool EmbeddingTable::Evictable(const Stripe& stripe, uint32_t slot,
                               int64_t now_micros) const {
  const EvictionConfig& policy = config_.eviction;
  const RowStamp& stamp = stripe.stamps[slot];
  if (policy.after_seconds > 0 &&
      now_micros - stamp.micros >=
          static_cast<int64_t>(policy.after_seconds) * 1000000) {
    return true;
  }
  const uint64_t latest = latest_step();
  if (policy.after_steps > 0 && latest > 0) {
    const uint64_t since =
        std::max(stamp.step, first_step_.load(std::memory_order_relaxed));
    if (latest >= since && latest - since >= policy.after_steps) return true;
  }
  if (policy.min_norm > 0.0f) {
    const float* value = stripe.rows.data() + size_t{slot} * row_width_;
    double squares = 0;
    for (uint32_t d = 0; d < config_.dim; ++d) {
      squares += double{value[d]} * value[d];
    }
    if (std::sqrt(squares) < policy.min_norm) return true;
  }
  return false;
}

std::vector<FeatureId> EmbeddingTable::EvictionCandidates(size_t s) const {
  std::vector<FeatureId> candidates;
  if (!evicts_) return candidates;
  const int64_t now = absl::ToUnixMicros(clock_->Now());
  const Stripe& stripe = stripes_[s];
  absl::ReaderMutexLock lock(&stripe.mu);
  for (uint32_t slot = 0; slot < stripe.keys.size(); ++slot) {
    if (Evictable(stripe, slot, now)) candidates.push_back(stripe.keys[slot]);
  }
  return candidates;
}

void EmbeddingTable::EvictRows(
    size_t s, absl::Span<const FeatureId> candidates,
    const std::function<void(FeatureId key)>& on_evicted) {
  if (!evicts_) return;
  const int64_t now = absl::ToUnixMicros(clock_->Now());
  Stripe& stripe = stripes_[s];
  absl::MutexLock lock(&stripe.mu);
  for (FeatureId key : candidates) {
    // A push may have updated (or a sweep deleted) the row since the scan.
    const uint32_t slot = stripe.index.Find(key);
    if (slot == embedding_internal::RowIndex::kAbsent ||
        !Evictable(stripe, slot, now)) {
      continue;
    }
    DeleteRow(stripe, key);
    evicted_rows_.fetch_add(1, std::memory_order_relaxed);
    on_evicted(key);
  }
}

void EmbeddingTable::DeleteRow(Stripe& stripe, FeatureId key) {
  const uint32_t slot = stripe.index.Find(key);
  const uint32_t last = static_cast<uint32_t>(stripe.keys.size() - 1);
  if (slot != last) {
    // Rows stay contiguous: the last one moves into the hole.
    std::memcpy(stripe.rows.data() + size_t{slot} * row_width_,
                stripe.rows.data() + size_t{last} * row_width_,
                row_width_ * sizeof(float));
    const FeatureId moved = stripe.keys[last];
    stripe.index.Set(moved, slot);
    stripe.keys[slot] = moved;
    if (evicts_) stripe.stamps[slot] = stripe.stamps[last];
    if (budgeted_) stripe.referenced[slot] = stripe.referenced[last];
  }
  stripe.index.Erase(key);  // and its dirty mark
  stripe.rows.resize(stripe.rows.size() - row_width_);
  stripe.keys.pop_back();
  if (evicts_) stripe.stamps.pop_back();
  if (budgeted_) stripe.referenced.pop_back();
}

uint64_t EmbeddingTable::num_rows() const {
  return rows_in_memory() +
         static_cast<uint64_t>(cold_rows_.load(std::memory_order_relaxed));
}

uint64_t EmbeddingTable::rows_in_memory() const {
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
    bytes +=
        stripe.index.capacity() * sizeof(embedding_internal::RowIndex::Entry);
    bytes += stripe.dirty_keys.capacity() * sizeof(FeatureId);
    bytes += stripe.keys.capacity() * sizeof(FeatureId) +
             stripe.stamps.capacity() * sizeof(RowStamp) +
             stripe.referenced.capacity();
  }
  if (admission_ != nullptr) bytes += admission_->memory_bytes();
  return bytes;
}

}  // namespace strata
