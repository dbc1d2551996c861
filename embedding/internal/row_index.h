#ifndef STRATA_EMBEDDING_INTERNAL_ROW_INDEX_H_
#define STRATA_EMBEDDING_INTERNAL_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/hash.h"
#include "common/prefetch.h"
#include "embedding/table_config.h"

namespace strata {
namespace embedding_internal {

// Maps the keys of one stripe of an EmbeddingTable to their row slots.
//
// Open addressing with linear probing over 16-byte entries (key, slot), four
// to a 64-byte cache line, at most 7/10 full; an entry is deleted by shifting
// the entries after it back (no tombstones). Why not absl::flat_hash_map: a
// lookup of a large table misses the cache twice there, once in the control
// bytes and once in the slot, which can be up to four lines past the one
// `prefetch` fetches. Here a key is almost always in the line of its home
// entry or the next, so Prefetch brings in what Find will read.
//
// Each key also has a dirty mark (EmbeddingTable: its row changed since it
// was last written to disk). It sits in the entry's padding, so marking a
// key that was just found touches no other line, where a set of dirty keys
// beside the index cost a push a cache miss and its growth per key.
//
// Not thread-safe: the stripe's lock guards it (Find and Prefetch only read).
class RowIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  struct Entry {
    FeatureId key;
    uint32_t slot;   // kAbsent: the entry is empty.
    uint32_t dirty;  // 1: marked.
  };
  // What iteration yields.
  struct KeyAndSlot {
    FeatureId key;
    uint32_t slot;
  };

  RowIndex() = default;
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;
  RowIndex(RowIndex&& other) noexcept;
  RowIndex& operator=(RowIndex&& other) noexcept;

  size_t size() const { return size_; }
  // Keys marked dirty.
  size_t dirty_count() const { return dirty_count_; }
  // Entries allocated (each sizeof(Entry) bytes).
  size_t capacity() const { return mask_ == 0 ? 0 : mask_ + 1; }

  // The slot of `key`, or kAbsent.
  uint32_t Find(FeatureId key) const {
    if (size_ == 0) return kAbsent;
    // The entry that ends the probe is empty (slot kAbsent) or `key`'s.
    return entries_.get()[PositionOf(key)].slot;
  }
  bool Contains(FeatureId key) const { return Find(key) != kAbsent; }
  // Hints the CPU to fetch the lines a Find of `key` reads.
  void Prefetch(FeatureId key) const {
    if (size_ == 0) return;
    const size_t home = Home(key);
    const Entry* entries = entries_.get();
    PrefetchLine(entries + home);
    // A key past the middle of its home line spills into the next one
    // often enough at 7/10 full to be worth a second hint.
    if ((home & (kEntriesPerLine - 1)) >= kEntriesPerLine / 2) {
      PrefetchLine(entries + ((home + kEntriesPerLine) & mask_));
    }
  }

  // Maps `key` to `slot` (< kAbsent), replacing its slot if it has one (its
  // mark stays). A new key is not marked.
  void Set(FeatureId key, uint32_t slot);
  // Removes `key` and its mark; false when it was not there.
  bool Erase(FeatureId key);

  // Marks `key`; true when it was there and not marked before.
  bool MarkDirty(FeatureId key) { return SetMark(key, 1); }
  // Unmarks `key`; true when it was there and marked.
  bool ClearDirty(FeatureId key) { return SetMark(key, 0); }
  bool IsDirty(FeatureId key) const {
    if (size_ == 0) return false;
    const Entry& entry = entries_.get()[PositionOf(key)];
    return entry.slot != kAbsent && entry.dirty != 0;
  }
  // Makes room for `count` keys in all, so that adding them allocates
  // nothing more.
  void Reserve(size_t count);
  // Reallocates to what `count` keys (at least size()) need, giving back
  // what growth past that took.
  void ShrinkTo(size_t count);

  // Iterates over the entries holding keys, in no particular order:
  // for (const auto& [key, slot] : index).
  class ConstIterator {
   public:
    ConstIterator(const Entry* at, const Entry* end) : at_(at), end_(end) {
      SkipEmpty();
    }
    KeyAndSlot operator*() const { return KeyAndSlot{at_->key, at_->slot}; }
    ConstIterator& operator++() {
      ++at_;
      SkipEmpty();
      return *this;
    }
    bool operator==(const ConstIterator& other) const {
      return at_ == other.at_;
    }
    bool operator!=(const ConstIterator& other) const {
      return at_ != other.at_;
    }

   private:
    void SkipEmpty() {
      while (at_ != end_ && at_->slot == kAbsent) ++at_;
    }
    const Entry* at_;
    const Entry* end_;
  };
  ConstIterator begin() const {
    return ConstIterator(entries_.get(), entries_.get() + capacity());
  }
  ConstIterator end() const {
    return ConstIterator(entries_.get() + capacity(),
                         entries_.get() + capacity());
  }

  // The bytes an index reserved for `count` keys holds.
  static size_t BytesFor(size_t count) {
    return CapacityFor(count) * sizeof(Entry);
  }

 private:
  static constexpr size_t kEntriesPerLine = 64 / sizeof(Entry);
  struct FreeEntries {
    void operator()(Entry* entries) const { std::free(entries); }
  };

  // The smallest power of two (at least one cache line) that holds `count`
  // keys at most 7/10 full; 0 for none.
  static size_t CapacityFor(size_t count);
  size_t Home(FeatureId key) const {
    // The stripe is chosen by Mix64's top bits; the home by its low ones.
    return static_cast<size_t>(Mix64(key)) & mask_;
  }
  // The position of `key`'s entry, or of the empty entry its probe ends at
  // (where it would go). REQUIRES: capacity() > 0.
  size_t PositionOf(FeatureId key) const {
    const Entry* entries = entries_.get();
    size_t i = Home(key);
    while (entries[i].slot != kAbsent && entries[i].key != key) {
      i = (i + 1) & mask_;
    }
    return i;
  }
  // Sets the mark of `key` to `mark`; true when `key` is there and its mark
  // changed.
  bool SetMark(FeatureId key, uint32_t mark) {
    if (size_ == 0) return false;
    Entry& entry = entries_.get()[PositionOf(key)];
    if (entry.slot == kAbsent || entry.dirty == mark) return false;
    entry.dirty = mark;
    if (mark != 0) {
      ++dirty_count_;
    } else {
      --dirty_count_;
    }
    return true;
  }
  // Reallocates to `capacity` entries (a power of two) and reinserts.
  void Rehash(size_t capacity);

  std::unique_ptr<Entry, FreeEntries> entries_;
  size_t mask_ = 0;  // capacity() - 1, or 0 with nothing allocated.
  size_t size_ = 0;
  size_t dirty_count_ = 0;
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_ROW_INDEX_H_
