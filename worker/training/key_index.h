#ifndef STRATA_WORKER_TRAINING_KEY_INDEX_H_
#define STRATA_WORKER_TRAINING_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace strata {

// Numbers the distinct keys of a batch in order of first appearance. Its
// owner keeps one for all the batches it indexes: a fresh hash map per
// batch (26k keys at the default shape) paid for its allocation and for
// clearing its control bytes on every step, and its inserts waited on cache
// misses that this table fetches ahead. Not thread-safe.
class KeyIndex {
 public:
  // Appends each distinct key of `keys` to *unique_keys (cleared first) and
  // sets rows[k] to the position of keys[k] there. rows.size() must be
  // keys.size().
  void Index(absl::Span<const uint64_t> keys,
             std::vector<uint64_t>* unique_keys, absl::Span<uint32_t> rows);

  // Slots in the table now (a power of two, at least twice the keys of the
  // largest batch indexed); for tests.
  size_t capacity() const { return slots_.size(); }

 private:
  struct Slot {
    uint64_t key;
    uint32_t row;
    uint32_t generation;  // The slot is empty unless this is generation_.
  };

  // Empties the table, with room for `keys` keys at half load.
  void Reset(size_t keys);
  size_t Home(uint64_t key) const;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_KEY_INDEX_H_
