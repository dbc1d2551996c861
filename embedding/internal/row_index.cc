#include "embedding/internal/row_index.h"

#include <algorithm>
#include <new>
#include <utility>

namespace strata {
namespace embedding_internal {

RowIndex::RowIndex(RowIndex&& other) noexcept
    : entries_(std::move(other.entries_)),
      mask_(std::exchange(other.mask_, 0)),
      size_(std::exchange(other.size_, 0)),
      dirty_count_(std::exchange(other.dirty_count_, 0)) {}

RowIndex& RowIndex::operator=(RowIndex&& other) noexcept {
  entries_ = std::move(other.entries_);
  mask_ = std::exchange(other.mask_, 0);
  size_ = std::exchange(other.size_, 0);
  dirty_count_ = std::exchange(other.dirty_count_, 0);
  return *this;
}

size_t RowIndex::CapacityFor(size_t count) {
  if (count == 0) return 0;
  size_t capacity = kEntriesPerLine;
  // count <= 7/10 of the capacity, in integers.
  while (capacity * 7 < count * 10) capacity *= 2;
  return capacity;
}

void RowIndex::Set(FeatureId key, uint32_t slot) {
  if ((size_ + 1) * 10 > capacity() * 7) {
    Rehash(std::max(CapacityFor(size_ + 1), 2 * capacity()));
  }
  Entry& entry = entries_.get()[PositionOf(key)];
  if (entry.slot == kAbsent) {
    ++size_;
    entry = Entry{key, slot, 0};
  } else {
    entry.slot = slot;
  }
}

bool RowIndex::Erase(FeatureId key) {
  if (size_ == 0) return false;
  Entry* entries = entries_.get();
  size_t hole = PositionOf(key);
  if (entries[hole].slot == kAbsent) return false;
  if (entries[hole].dirty != 0) --dirty_count_;
  // Every entry after the hole up to the next empty one was placed by
  // probing from its home; one whose home is not in (hole, next] would be
  // cut off from it by the hole, so it moves into the hole, which moves on.
  for (size_t next = (hole + 1) & mask_; entries[next].slot != kAbsent;
       next = (next + 1) & mask_) {
    const size_t from_home = (next - Home(entries[next].key)) & mask_;
    const size_t from_hole = (next - hole) & mask_;
    if (from_home >= from_hole) {
      entries[hole] = entries[next];
      hole = next;
    }
  }
  entries[hole].slot = kAbsent;
  --size_;
  return true;
}

void RowIndex::Reserve(size_t count) {
  const size_t wanted = CapacityFor(count);
  if (wanted > capacity()) Rehash(wanted);
}

void RowIndex::ShrinkTo(size_t count) {
  const size_t wanted = CapacityFor(std::max(count, size_));
  if (wanted != capacity()) Rehash(wanted);
}

void RowIndex::Rehash(size_t capacity) {
  std::unique_ptr<Entry, FreeEntries> old = std::move(entries_);
  const size_t old_capacity = this->capacity();
  if (capacity == 0) {
    mask_ = 0;
    return;
  }
  // Line-aligned, so that each line holds four whole entries.
  void* memory = std::aligned_alloc(64, capacity * sizeof(Entry));
  if (memory == nullptr) throw std::bad_alloc();
  entries_.reset(static_cast<Entry*>(memory));
  Entry* entries = entries_.get();
  for (size_t i = 0; i < capacity; ++i) entries[i] = Entry{0, kAbsent, 0};
  mask_ = capacity - 1;
  // Every key moves with its mark; size_ and dirty_count_ stay.
  for (size_t i = 0; i < old_capacity; ++i) {
    const Entry& entry = old.get()[i];
    if (entry.slot != kAbsent) entries[PositionOf(entry.key)] = entry;
  }
}

}  // namespace embedding_internal
}  // namespace strata
