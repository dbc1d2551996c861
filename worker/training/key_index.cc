#include "worker/training/key_index.h"

#include "common/hash.h"

namespace strata {
namespace {

// Keys whose slots are fetched before the key being inserted: enough to
// cover a miss to memory, as the inserts themselves take a few ns each.
constexpr size_t kKeysAhead = 8;

}  // namespace

void KeyIndex::Reset(size_t keys) {
  size_t capacity = 16;
  while (capacity < 2 * keys) capacity *= 2;
  if (capacity > slots_.size()) {
    slots_.assign(capacity, Slot{0, 0, 0});
    mask_ = capacity - 1;
    generation_ = 0;
  }
  if (++generation_ == 0) {
    // After 2^32 batches a slot's old generation could read as current.
    for (Slot& slot : slots_) slot.generation = 0;
    generation_ = 1;
  }
}

size_t KeyIndex::Home(uint64_t key) const { return Mix64(key) & mask_; }

void KeyIndex::Index(absl::Span<const uint64_t> keys,
                     std::vector<uint64_t>* unique_keys,
                     absl::Span<uint32_t> rows) {
  Reset(keys.size());
  unique_keys->clear();
  for (size_t k = 0; k < keys.size(); ++k) {
    if (k + kKeysAhead < keys.size()) {
      __builtin_prefetch(&slots_[Home(keys[k + kKeysAhead])]);
    }
    const uint64_t key = keys[k];
    size_t at = Home(key);
    while (true) {
      Slot& slot = slots_[at];
      if (slot.generation != generation_) {
        slot =
            Slot{key, static_cast<uint32_t>(unique_keys->size()), generation_};
        rows[k] = slot.row;
        unique_keys->push_back(key);
        break;
      }
      if (slot.key == key) {
        rows[k] = slot.row;
        break;
      }
      at = (at + 1) & mask_;
    }
  }
}

}  // namespace strata
