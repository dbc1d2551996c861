#include "embedding/internal/sorted_runs_memtable.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace embedding_internal {
namespace {

using Entries = std::vector<const char*>;
using KeyComparator = rocksdb::MemTableRep::KeyComparator;

// Puts `entries` in key order, given where each run of entries that
// arrived in order starts (run_starts[0] == 0).
void OrderRuns(const KeyComparator& compare, std::vector<size_t> run_starts,
               Entries& entries) {
  const auto less = [&compare](const char* a, const char* b) {
    return compare(a, b) < 0;
  };
  if (run_starts.size() > SortedRunsMemTableFactory::kMaxRunsToMerge) {
    std::sort(entries.begin(), entries.end(), less);
    return;
  }
  // Neighbouring runs merged pairwise, halving the runs each pass.
  while (run_starts.size() > 1) {
    std::vector<size_t> merged;
    for (size_t r = 0; r < run_starts.size(); r += 2) {
      merged.push_back(run_starts[r]);
      if (r + 1 == run_starts.size()) break;
      const size_t end =
          r + 2 < run_starts.size() ? run_starts[r + 2] : entries.size();
      std::inplace_merge(entries.begin() + run_starts[r],
                         entries.begin() + run_starts[r + 1],
                         entries.begin() + end, less);
    }
    run_starts = std::move(merged);
  }
}

// An iterator over entries in key order, which it shares.
class OrderedIterator : public rocksdb::MemTableRep::Iterator {
 public:
  OrderedIterator(std::shared_ptr<const Entries> entries,
                  const KeyComparator& compare)
      : entries_(std::move(entries)),
        compare_(compare),
        position_(entries_->size()) {}

  bool Valid() const override { return position_ < entries_->size(); }
  const char* key() const override { return (*entries_)[position_]; }
  void Next() override { ++position_; }
  void Prev() override {
    position_ = position_ == 0 ? entries_->size() : position_ - 1;
  }
  // The first entry at or after `internal_key`.
  void Seek(const rocksdb::Slice& internal_key, const char*) override {
    position_ = FirstWhere(
        [&](const char* entry) { return compare_(entry, internal_key) >= 0; });
  }
  // The last entry at or before `internal_key`.
  void SeekForPrev(const rocksdb::Slice& internal_key, const char*) override {
    const size_t after = FirstWhere(
        [&](const char* entry) { return compare_(entry, internal_key) > 0; });
    position_ = after == 0 ? entries_->size() : after - 1;
  }
  void SeekToFirst() override { position_ = 0; }
  void SeekToLast() override {
    position_ = entries_->empty() ? 0 : entries_->size() - 1;
  }

 private:
  // The index of the first entry for which `at_or_past` holds (entries are
  // ordered, so it holds for all after it), or size() if none.
  template <typename Predicate>
  size_t FirstWhere(Predicate at_or_past) const {
    return std::partition_point(
               entries_->begin(), entries_->end(),
               [&](const char* entry) { return !at_or_past(entry); }) -
           entries_->begin();
  }

  const std::shared_ptr<const Entries> entries_;
  const KeyComparator& compare_;
  size_t position_;
};

class SortedRunsMemTable : public rocksdb::MemTableRep {
 public:
  SortedRunsMemTable(const KeyComparator& compare,
                     rocksdb::Allocator* allocator,
                     std::unique_ptr<rocksdb::MemTableRep> point_lookups)
      : MemTableRep(allocator),
        compare_(compare),
        point_lookups_(std::move(point_lookups)) {}

  void Insert(rocksdb::KeyHandle handle) override {
    point_lookups_->Insert(handle);
    const char* entry = static_cast<const char*>(handle);
    absl::MutexLock lock(&mu_);
    if (!entries_.empty() && compare_(entries_.back(), entry) > 0) {
      run_starts_.push_back(entries_.size());
    }
    entries_.push_back(entry);
  }

  bool Contains(const char* key) const override {
    return point_lookups_->Contains(key);
  }

  void MarkReadOnly() override {
    point_lookups_->MarkReadOnly();
    absl::MutexLock lock(&mu_);
    read_only_ = true;
  }

  void Get(const rocksdb::LookupKey& key, void* callback_args,
           bool (*callback)(void* arg, const char* entry)) override {
    point_lookups_->Get(key, callback_args, callback);
  }

  size_t ApproximateMemoryUsage() override {
    absl::MutexLock lock(&mu_);
    const size_t ordered = ordered_ == nullptr ? 0 : ordered_->capacity();
    return point_lookups_->ApproximateMemoryUsage() +
           (entries_.capacity() + ordered) * sizeof(const char*) +
           run_starts_.capacity() * sizeof(size_t);
  }

  // With an arena, RocksDB only destroys the iterator and never frees it:
  // its storage must outlive the iterator, and the memtable's does.
  // (RocksDB's Arena is not in its public headers, so the storage is ours.)
  Iterator* GetIterator(rocksdb::Arena* arena) override {
    std::shared_ptr<const Entries> entries = OrderedEntries();
    if (arena == nullptr)
      return new OrderedIterator(std::move(entries), compare_);
    absl::MutexLock lock(&mu_);
    IteratorStorage& storage = iterator_storage_.emplace_back();
    return new (storage.bytes) OrderedIterator(std::move(entries), compare_);
  }

 private:
  struct IteratorStorage {
    alignas(OrderedIterator) unsigned char bytes[sizeof(OrderedIterator)];
  };

  // The entries in key order: for a read-only memtable ordered once and
  // kept, for one still written a copy of what it holds now.
  std::shared_ptr<const Entries> OrderedEntries() {
    Entries copy;
    std::vector<size_t> run_starts;
    {
      absl::MutexLock lock(&mu_);
      if (ordered_ != nullptr) return ordered_;
      if (read_only_) {
        OrderRuns(compare_, std::move(run_starts_), entries_);
        ordered_ = std::make_shared<const Entries>(std::move(entries_));
        entries_ = Entries();
        run_starts_ = {0};
        return ordered_;
      }
      copy = entries_;
      run_starts = run_starts_;
    }
    OrderRuns(compare_, std::move(run_starts), copy);
    return std::make_shared<const Entries>(std::move(copy));
  }

  const KeyComparator& compare_;
  const std::unique_ptr<rocksdb::MemTableRep> point_lookups_;
  absl::Mutex mu_;
  Entries entries_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> run_starts_ ABSL_GUARDED_BY(mu_) = {0};
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const Entries> ordered_ ABSL_GUARDED_BY(mu_);
  std::deque<IteratorStorage> iterator_storage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

rocksdb::MemTableRep* SortedRunsMemTableFactory::CreateMemTableRep(
    const rocksdb::MemTableRep::KeyComparator& compare,
    rocksdb::Allocator* allocator, const rocksdb::SliceTransform* transform,
    rocksdb::Logger* logger) {
  rocksdb::VectorRepFactory vectors;
  return new SortedRunsMemTable(
      compare, allocator,
      std::unique_ptr<rocksdb::MemTableRep>(
          vectors.CreateMemTableRep(compare, allocator, transform, logger)));
}

}  // namespace embedding_internal
}  // namespace strata
