#include "serving/internal/row_cache.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/hash.h"
#include "common/prefetch.h"

namespace strata {
namespace serving_internal {
namespace {

// A ticket that is never accepted: a write was in flight when it was taken.
constexpr uint64_t kNoTicket = 0;

}  // namespace

RowCache::RowCache(uint64_t capacity)
    : capacity_(capacity),
      reserved_per_stripe_(capacity >= kStripes ? 1 : 0),
      shared_slots_left_(capacity - reserved_per_stripe_ * kStripes) {}

bool RowCache::TakeSharedSlot() {
  uint64_t left = shared_slots_left_.load(std::memory_order_relaxed);
  while (left > 0) {
    if (shared_slots_left_.compare_exchange_weak(left, left - 1,
                                                 std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

size_t RowCache::StripeOf(const RowId& id) {
  return Mix64(id.key ^ (uint64_t{id.table} << 32)) % kStripes;
}

uint32_t RowCache::FindSlot(const Stripe& stripe, const RowId& id) {
  auto table = stripe.index.find(id.table);
  if (table == stripe.index.end()) return embedding_internal::RowIndex::kAbsent;
  return table->second.Find(id.key);
}

void RowCache::Unindex(Stripe& stripe, const RowId& id) {
  auto table = stripe.index.find(id.table);
  table->second.Erase(id.key);
  if (table->second.size() == 0) stripe.index.erase(table);
}

void RowCache::GetMany(TableId table, absl::Span<const FeatureId> keys,
                       size_t dim, absl::Span<float> out,
                       std::vector<size_t>& misses,
                       std::vector<uint64_t>& tickets) {
  if (capacity_ == 0) {
    for (size_t i = 0; i < keys.size(); ++i) {
      misses.push_back(i);
      tickets.push_back(kNoTicket);
    }
    return;
  }
  // The keys' indices ordered by stripe (a counting sort), so that each
  // stripe is locked once.
  std::vector<uint8_t> stripe_of(keys.size());
  std::array<size_t, kStripes + 1> start{};
  for (size_t i = 0; i < keys.size(); ++i) {
    stripe_of[i] = static_cast<uint8_t>(StripeOf({table, keys[i]}));
    ++start[stripe_of[i] + 1];
  }
  for (size_t s = 0; s < kStripes; ++s) start[s + 1] += start[s];
  std::vector<size_t> order(keys.size());
  std::array<size_t, kStripes> next{};
  std::copy(start.begin(), start.end() - 1, next.begin());
  for (size_t i = 0; i < keys.size(); ++i) order[next[stripe_of[i]]++] = i;
  for (size_t s = 0; s < kStripes; ++s) {
    if (start[s] == start[s + 1]) continue;
    Stripe& stripe = stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    GetFromStripe(
        stripe, table, keys,
        absl::MakeConstSpan(order).subspan(start[s], start[s + 1] - start[s]),
        dim, out, misses, tickets);
  }
}

void RowCache::GetFromStripe(Stripe& stripe, TableId table,
                             absl::Span<const FeatureId> keys,
                             absl::Span<const size_t> positions, size_t dim,
                             absl::Span<float> out, std::vector<size_t>& misses,
                             std::vector<uint64_t>& tickets) {
  using embedding_internal::RowIndex;
  const uint64_t ticket = stripe.writers == 0 ? stripe.generation : kNoTicket;
  auto found = stripe.index.find(table);
  if (found == stripe.index.end()) {
    for (size_t i : positions) {
      misses.push_back(i);
      tickets.push_back(ticket);
    }
    stripe.misses += positions.size();
    return;
  }
  const size_t misses_before = misses.size();
  const RowIndex& index = found->second;
  // The lambdas below run here, under the stripe's lock, which keeps the
  // slots where they are.
  Slot* const slots = stripe.slots.data();
  // Each key's memory is fetched in three steps, each once the step before
  // has had time to arrive: its index lines kIndexAhead keys before it is
  // copied, its slot (found in those lines) kSlotAhead keys before, its row
  // (whose address is in the slot) kRowAhead keys before.
  constexpr size_t kIndexAhead = 12;
  constexpr size_t kSlotAhead = 8;
  constexpr size_t kRowAhead = 4;
  constexpr size_t kRing = 16;  // Slots found, kept until their key's turn.
  std::array<uint32_t, kRing> slot_at;
  const size_t n = positions.size();
  auto key = [&](size_t k) { return keys[positions[k]]; };
  auto find_and_fetch_slot = [&](size_t k) {
    const uint32_t slot = index.Find(key(k));
    slot_at[k % kRing] = slot;
    if (slot == RowIndex::kAbsent) return;
    const Slot* address = &slots[slot];
    PrefetchLine(address);
    PrefetchLine(reinterpret_cast<const char*>(address + 1) - 1);
  };
  auto fetch_row = [&](size_t k) {
    const uint32_t slot = slot_at[k % kRing];
    if (slot == RowIndex::kAbsent) return;
    const std::vector<float>& values = slots[slot].values;
    const char* begin = reinterpret_cast<const char*>(values.data());
    const char* end = begin + values.size() * sizeof(float);
    for (const char* line = begin; line < end; line += 64) PrefetchLine(line);
  };
  for (size_t k = 0; k < std::min(n, kIndexAhead); ++k) index.Prefetch(key(k));
  for (size_t k = 0; k < std::min(n, kSlotAhead); ++k) find_and_fetch_slot(k);
  for (size_t k = 0; k < std::min(n, kRowAhead); ++k) fetch_row(k);
  for (size_t k = 0; k < n; ++k) {
    if (k + kIndexAhead < n) index.Prefetch(key(k + kIndexAhead));
    if (k + kSlotAhead < n) find_and_fetch_slot(k + kSlotAhead);
    if (k + kRowAhead < n) fetch_row(k + kRowAhead);
    const uint32_t slot = slot_at[k % kRing];
    Slot* cached = slot == RowIndex::kAbsent ? nullptr : &slots[slot];
    // A row of another size belongs to a table whose dimension changed.
    if (cached == nullptr || cached->values.size() != dim) {
      misses.push_back(positions[k]);
      tickets.push_back(ticket);
      continue;
    }
    cached->referenced = true;
    std::copy(cached->values.begin(), cached->values.end(),
              out.begin() + positions[k] * dim);
  }
  const size_t missed = misses.size() - misses_before;
  stripe.misses += missed;
  stripe.hits += n - missed;
}

void RowCache::Offer(const RowId& id, uint64_t ticket,
                     absl::Span<const float> values) {
  if (capacity_ == 0 || ticket == kNoTicket) return;
  Stripe& stripe = stripes_[StripeOf(id)];
  absl::MutexLock lock(&stripe.mu);
  if (stripe.writers == 0 && stripe.generation == ticket) {
    Put(stripe, id, values);
  }
}

void RowCache::Put(Stripe& stripe, const RowId& id,
                   absl::Span<const float> values) {
  const uint32_t found = FindSlot(stripe, id);
  if (found != embedding_internal::RowIndex::kAbsent) {
    Slot& slot = stripe.slots[found];
    slot.values.assign(values.begin(), values.end());
    slot.referenced = true;
    return;
  }
  const uint32_t index = TakeSlot(stripe);
  if (index == kNoSlot) return;
  Slot& slot = stripe.slots[index];
  slot.id = id;
  // A new row gets one pass of the hand before it can go, as the most
  // recently used row of an LRU list would.
  slot.referenced = true;
  slot.values.assign(values.begin(), values.end());
  stripe.index[id.table].Set(id.key, index);
}

uint32_t RowCache::TakeSlot(Stripe& stripe) {
  if (!stripe.free_slots.empty()) {
    const uint32_t index = stripe.free_slots.back();
    stripe.free_slots.pop_back();
    return index;
  }
  const bool reserved = stripe.slots.size() < reserved_per_stripe_;
  // Slots are indexed by uint32_t, kNoSlot and RowIndex::kAbsent excluded.
  const bool room = stripe.slots.size() < kNoSlot - 1;
  if (reserved || (room && TakeSharedSlot())) {
    stripe.slots.emplace_back();
    return static_cast<uint32_t>(stripe.slots.size() - 1);
  }
  if (stripe.slots.empty()) return kNoSlot;
  // Every slot is in use (free ones were taken above): at most two turns
  // of the hand find one whose bit is clear.
  while (true) {
    const uint32_t index = static_cast<uint32_t>(stripe.hand);
    stripe.hand = (stripe.hand + 1) % stripe.slots.size();
    Slot& slot = stripe.slots[index];
    if (slot.referenced) {
      slot.referenced = false;
      continue;
    }
    Unindex(stripe, slot.id);
    ++stripe.evictions;
    return index;
  }
}

bool RowCache::Remove(Stripe& stripe, const RowId& id) {
  const uint32_t found = FindSlot(stripe, id);
  if (found == embedding_internal::RowIndex::kAbsent) return false;
  Slot& slot = stripe.slots[found];
  slot.referenced = false;
  slot.values.clear();
  stripe.free_slots.push_back(found);
  Unindex(stripe, id);
  return true;
}

template <typename Fn>
void RowCache::ForEachStripe(absl::Span<const CachedWrite> writes, Fn fn) {
  std::array<std::vector<size_t>, kStripes> members;
  for (size_t i = 0; i < writes.size(); ++i) {
    members[StripeOf(writes[i].id)].push_back(i);
  }
  for (size_t s = 0; s < kStripes; ++s) {
    if (!members[s].empty()) fn(stripes_[s], members[s]);
  }
}

void RowCache::Contains(absl::Span<const CachedWrite> writes,
                        std::vector<bool>& cached) {
  cached.assign(writes.size(), false);
  if (capacity_ == 0) return;
  ForEachStripe(writes, [&](Stripe& stripe, const std::vector<size_t>& rows) {
    absl::MutexLock lock(&stripe.mu);
    for (size_t i : rows) {
      cached[i] = FindSlot(stripe, writes[i].id) !=
                  embedding_internal::RowIndex::kAbsent;
    }
  });
}

void RowCache::BeginWrite(absl::Span<const CachedWrite> writes,
                          std::vector<bool>& was_cached) {
  was_cached.assign(writes.size(), false);
  if (capacity_ == 0) return;
  ForEachStripe(writes, [&](Stripe& stripe, const std::vector<size_t>& rows) {
    absl::MutexLock lock(&stripe.mu);
    ++stripe.writers;
    ++stripe.generation;
    for (size_t i : rows) {
      if (Remove(stripe, writes[i].id)) was_cached[i] = true;
    }
  });
}

void RowCache::EndWrite(absl::Span<const CachedWrite> writes,
                        const std::vector<bool>& was_cached) {
  if (capacity_ == 0) return;
  ForEachStripe(writes, [&](Stripe& stripe, const std::vector<size_t>& rows) {
    absl::MutexLock lock(&stripe.mu);
    // In order, so that of two writes of one row the later one's value
    // stays; only the first of them found the row cached.
    absl::flat_hash_set<RowId> cached;
    for (size_t i : rows) {
      const CachedWrite& write = writes[i];
      if (!was_cached[i] && !cached.contains(write.id)) continue;
      cached.insert(write.id);
      if (write.values.empty()) {
        Remove(stripe, write.id);
      } else {
        Put(stripe, write.id, write.values);
      }
    }
    --stripe.writers;
    ++stripe.generation;
  });
}

void RowCache::BeginClear() {
  for (Stripe& stripe : stripes_) {
    absl::MutexLock lock(&stripe.mu);
    ++stripe.writers;
    ++stripe.generation;
  }
}

void RowCache::EndClear() {
  for (Stripe& stripe : stripes_) {
    absl::MutexLock lock(&stripe.mu);
    if (stripe.slots.size() > reserved_per_stripe_) {
      shared_slots_left_.fetch_add(stripe.slots.size() - reserved_per_stripe_,
                                   std::memory_order_relaxed);
    }
    stripe.slots.clear();
    stripe.free_slots.clear();
    stripe.index.clear();
    stripe.hand = 0;
    --stripe.writers;
    ++stripe.generation;
  }
}

RowCacheStats RowCache::Stats() {
  RowCacheStats stats;
  stats.capacity = capacity_;
  for (Stripe& stripe : stripes_) {
    absl::MutexLock lock(&stripe.mu);
    for (const auto& [table, index] : stripe.index) stats.rows += index.size();
    stats.hits += stripe.hits;
    stats.misses += stripe.misses;
    stats.evictions += stripe.evictions;
  }
  return stats;
}

uint64_t RowCache::size() { return Stats().rows; }

}  // namespace serving_internal
}  // namespace strata
