#include "serving/internal/row_cache.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/hash.h"

namespace strata {
namespace serving_internal {
namespace {

// A ticket that is never accepted: a write was in flight when it was taken.
constexpr uint64_t kNoTicket = 0;

}  // namespace

RowCache::RowCache(uint64_t capacity)
    : per_stripe_(capacity == 0 ? 0 : (capacity + kStripes - 1) / kStripes) {}

size_t RowCache::StripeOf(const RowId& id) {
  return Mix64(id.key ^ (uint64_t{id.table} << 32)) % kStripes;
}

bool RowCache::GetLocked(Stripe& stripe, const RowId& id, absl::Span<float> out,
                         uint64_t* ticket) {
  auto it = stripe.index.find(id);
  Slot* slot = it == stripe.index.end() ? nullptr : &stripe.slots[it->second];
  if (slot == nullptr || slot->values.size() != out.size()) {
    if (stripe.writers == 0) *ticket = stripe.generation;
    return false;
  }
  slot->referenced = true;
  std::copy(slot->values.begin(), slot->values.end(), out.begin());
  return true;
}

void RowCache::GetMany(TableId table, absl::Span<const FeatureId> keys,
                       size_t dim, absl::Span<float> out,
                       std::vector<size_t>& misses,
                       std::vector<uint64_t>& tickets) {
  if (per_stripe_ == 0) {
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
    for (size_t k = start[s]; k < start[s + 1]; ++k) {
      const size_t i = order[k];
      uint64_t ticket = kNoTicket;
      if (!GetLocked(stripe, {table, keys[i]}, out.subspan(i * dim, dim),
                     &ticket)) {
        misses.push_back(i);
        tickets.push_back(ticket);
      }
    }
  }
}

void RowCache::Offer(const RowId& id, uint64_t ticket,
                     absl::Span<const float> values) {
  if (per_stripe_ == 0 || ticket == kNoTicket) return;
  Stripe& stripe = stripes_[StripeOf(id)];
  absl::MutexLock lock(&stripe.mu);
  if (stripe.writers == 0 && stripe.generation == ticket) {
    Put(stripe, id, values);
  }
}

void RowCache::Put(Stripe& stripe, const RowId& id,
                   absl::Span<const float> values) {
  auto it = stripe.index.find(id);
  if (it != stripe.index.end()) {
    Slot& slot = stripe.slots[it->second];
    slot.values.assign(values.begin(), values.end());
    slot.referenced = true;
    return;
  }
  const uint32_t index = TakeSlot(stripe);
  Slot& slot = stripe.slots[index];
  slot.id = id;
  // A new row gets one pass of the hand before it can go, as the most
  // recently used row of an LRU list would.
  slot.referenced = true;
  slot.values.assign(values.begin(), values.end());
  stripe.index[id] = index;
}

uint32_t RowCache::TakeSlot(Stripe& stripe) {
  if (!stripe.free_slots.empty()) {
    const uint32_t index = stripe.free_slots.back();
    stripe.free_slots.pop_back();
    return index;
  }
  if (stripe.slots.size() < per_stripe_) {
    stripe.slots.emplace_back();
    return static_cast<uint32_t>(stripe.slots.size() - 1);
  }
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
    stripe.index.erase(slot.id);
    return index;
  }
}

bool RowCache::Remove(Stripe& stripe, const RowId& id) {
  auto it = stripe.index.find(id);
  if (it == stripe.index.end()) return false;
  Slot& slot = stripe.slots[it->second];
  slot.referenced = false;
  slot.values.clear();
  stripe.free_slots.push_back(it->second);
  stripe.index.erase(it);
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

void RowCache::BeginWrite(absl::Span<const CachedWrite> writes,
                          std::vector<bool>& was_cached) {
  was_cached.assign(writes.size(), false);
  if (per_stripe_ == 0) return;
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
  if (per_stripe_ == 0) return;
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
    stripe.slots.clear();
    stripe.free_slots.clear();
    stripe.index.clear();
    stripe.hand = 0;
    --stripe.writers;
    ++stripe.generation;
  }
}

uint64_t RowCache::size() {
  uint64_t total = 0;
  for (Stripe& stripe : stripes_) {
    absl::MutexLock lock(&stripe.mu);
    total += stripe.index.size();
  }
  return total;
}

}  // namespace serving_internal
}  // namespace strata
