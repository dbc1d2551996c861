#include "embedding/internal/sort_on_read_memtable.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/slice.h"

namespace strata {
namespace embedding_internal {
namespace {

using rocksdb::MemTableRep;
using rocksdb::Slice;
using Entries = std::vector<const char*>;

// An internal key is the user key followed by 8 bytes: (sequence << 8) |
// type, little-endian.
constexpr size_t kTagBytes = 8;
constexpr size_t kPrefixBytes = 16;

// Bytes [0, n) of `bytes` (n <= 8) as a big-endian number, zero-padded on
// the right: numbers compare as the bytes do.
uint64_t PrefixWord(const char* bytes, size_t n) {
  uint64_t word = 0;
  for (size_t i = 0; i < 8; ++i) {
    word <<= 8;
    if (i < n) word |= static_cast<unsigned char>(bytes[i]);
  }
  return word;
}

struct SortItem {
  uint64_t head;  // user key bytes 0..7
  uint64_t tail;  // user key bytes 8..15
  uint64_t tag;   // (sequence << 8) | type
  uint32_t key_size;
  const char* entry;
};

SortItem Decode(const char* entry) {
  const Slice internal_key = rocksdb::GetLengthPrefixedSlice(entry);
  const size_t key_size = internal_key.size() - kTagBytes;
  const char* key = internal_key.data();
  SortItem item;
  item.head = PrefixWord(key, std::min<size_t>(key_size, 8));
  item.tail = key_size > 8 ? PrefixWord(key + 8, key_size - 8) : 0;
  item.tag = 0;
  for (size_t i = 0; i < kTagBytes; ++i) {
    item.tag |= uint64_t{static_cast<unsigned char>(key[key_size + i])}
                << (8 * i);
  }
  item.key_size = static_cast<uint32_t>(key_size);
  item.entry = entry;
  return item;
}

// The internal key order for the bytewise comparator: user keys in byte
// order (a prefix first), then newer sequences first.
class ItemOrder {
 public:
  explicit ItemOrder(const MemTableRep::KeyComparator& compare)
      : compare_(compare) {}
  bool operator()(const SortItem& a, const SortItem& b) const {
    if (a.head != b.head) return a.head < b.head;
    if (a.tail != b.tail) return a.tail < b.tail;
    if (a.key_size > kPrefixBytes || b.key_size > kPrefixBytes) {
      return compare_(a.entry, b.entry) < 0;
    }
    if (a.key_size != b.key_size) return a.key_size < b.key_size;
    return a.tag > b.tag;
  }

 private:
  const MemTableRep::KeyComparator& compare_;
};

void SortEntries(const MemTableRep::KeyComparator& compare, Entries& entries) {
  std::vector<SortItem> items;
  items.reserve(entries.size());
  for (const char* entry : entries) items.push_back(Decode(entry));
  std::sort(items.begin(), items.end(), ItemOrder(compare));
  for (size_t i = 0; i < items.size(); ++i) entries[i] = items[i].entry;
}

class SortedIterator final : public MemTableRep::Iterator {
 public:
  SortedIterator(std::shared_ptr<const Entries> entries,
                 const MemTableRep::KeyComparator& compare)
      : entries_(std::move(entries)),
        compare_(compare),
        position_(entries_->size()) {}

  bool Valid() const override { return position_ < entries_->size(); }
  const char* key() const override { return (*entries_)[position_]; }
  void Next() override { ++position_; }
  void Prev() override {
    position_ = position_ == 0 ? entries_->size() : position_ - 1;
  }
  // The first entry at or after the target.
  void Seek(const Slice& internal_key, const char* memtable_key) override {
    position_ = static_cast<size_t>(
        std::partition_point(entries_->begin(), entries_->end(),
                             [&](const char* entry) {
                               return Compare(entry, internal_key,
                                              memtable_key) < 0;
                             }) -
        entries_->begin());
  }
  // The last entry at or before the target.
  void SeekForPrev(const Slice& internal_key,
                   const char* memtable_key) override {
    const size_t after = static_cast<size_t>(
        std::partition_point(entries_->begin(), entries_->end(),
                             [&](const char* entry) {
                               return Compare(entry, internal_key,
                                              memtable_key) <= 0;
                             }) -
        entries_->begin());
    position_ = after == 0 ? entries_->size() : after - 1;
  }
  void SeekToFirst() override { position_ = 0; }
  void SeekToLast() override {
    position_ = entries_->empty() ? 0 : entries_->size() - 1;
  }

 private:
  int Compare(const char* entry, const Slice& internal_key,
              const char* memtable_key) const {
    return memtable_key != nullptr ? compare_(entry, memtable_key)
                                   : compare_(entry, internal_key);
  }

  const std::shared_ptr<const Entries> entries_;
  const MemTableRep::KeyComparator& compare_;
  size_t position_;  // entries_->size(): not valid
};

class SortOnReadRep final : public MemTableRep {
 public:
  SortOnReadRep(const KeyComparator& compare, rocksdb::Allocator* allocator)
      : MemTableRep(allocator), compare_(compare) {}

  void Insert(rocksdb::KeyHandle handle) override {
    absl::MutexLock lock(&mu_);
    entries_.push_back(static_cast<const char*>(handle));
  }

  bool Contains(const char* key) const override {
    absl::ReaderMutexLock lock(&mu_);
    for (const Entries* entries : {&entries_, sorted_.get()}) {
      if (entries == nullptr) continue;
      for (const char* entry : *entries) {
        if (compare_(entry, key) == 0) return true;
      }
    }
    return false;
  }

  void MarkReadOnly() override {
    absl::MutexLock lock(&mu_);
    immutable_ = true;
  }

  size_t ApproximateMemoryUsage() override {
    absl::ReaderMutexLock lock(&mu_);
    size_t pointers = entries_.capacity();
    if (sorted_ != nullptr) pointers += sorted_->capacity();
    return sizeof(*this) + pointers * sizeof(const char*);
  }

  MemTableRep::Iterator* GetIterator(rocksdb::Arena* arena) override {
    std::shared_ptr<const Entries> sorted = SortedEntries();
    if (arena == nullptr)
      return new SortedIterator(std::move(sorted), compare_);
    // RocksDB only destroys an iterator it asked for in its arena, without
    // freeing it (RocksDB's arena is not part of its public API): the
    // storage stays here until the memtable, which outlives its iterators,
    // is deleted.
    absl::MutexLock lock(&mu_);
    iterator_storage_.emplace_back(new char[sizeof(SortedIterator)]);
    return new (iterator_storage_.back().get())
        SortedIterator(std::move(sorted), compare_);
  }

 private:
  // The entries in order: sorted once and shared once the memtable is
  // immutable, a sorted copy before.
  std::shared_ptr<const Entries> SortedEntries() {
    Entries copy;
    {
      absl::MutexLock lock(&mu_);
      if (immutable_) {
        if (sorted_ == nullptr) {
          auto sorted = std::make_shared<Entries>(std::move(entries_));
          entries_ = Entries();
          SortEntries(compare_, *sorted);
          sorted_ = std::move(sorted);
        }
        return sorted_;
      }
      copy = entries_;
    }
    SortEntries(compare_, copy);
    return std::make_shared<const Entries>(std::move(copy));
  }

  const KeyComparator& compare_;
  mutable absl::Mutex mu_;
  Entries entries_ ABSL_GUARDED_BY(mu_);  // in insertion order
  bool immutable_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const Entries> sorted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<char[]>> iterator_storage_ ABSL_GUARDED_BY(mu_);
};

class SortOnReadFactory final : public rocksdb::MemTableRepFactory {
 public:
  using MemTableRepFactory::CreateMemTableRep;
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 rocksdb::Allocator* allocator,
                                 const rocksdb::SliceTransform*,
                                 rocksdb::Logger*) override {
    return new SortOnReadRep(compare, allocator);
  }
  const char* Name() const override { return "StrataSortOnReadMemTable"; }
};

}  // namespace

std::shared_ptr<rocksdb::MemTableRepFactory> NewSortOnReadMemTableFactory() {
  return std::make_shared<SortOnReadFactory>();
}

}  // namespace embedding_internal
}  // namespace strata
