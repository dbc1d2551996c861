#ifndef STRATA_EMBEDDING_INTERNAL_SORTED_RUNS_MEMTABLE_H_
#define STRATA_EMBEDDING_INTERNAL_SORTED_RUNS_MEMTABLE_H_

#include "rocksdb/memtablerep.h"

namespace strata {
namespace embedding_internal {

// A RocksDB memtable for entries that mostly arrive in key order, as the
// store writes them: a flush writes its dirty rows sorted by key, and a
// bulk load writes ascending keys.
//
// Like RocksDB's vector memtable, an insert is an append and the entries
// are sorted only when the memtable is read (at its flush to an SST file,
// or by an iterator). Unlike it, each insert compares its entry with the
// last one, so the memtable knows the runs of entries that arrived in
// order: a memtable that is one run needs no sort at all, and a few runs
// are merged in O(n log runs). Only entries in no useful order
// (more than kMaxRunsToMerge runs) are sorted, as the vector memtable
// sorts every time; there std::sort's n log n comparisons, each decoding
// two internal keys, were a tenth of a pushing shard's CPU.
//
// Inserts come from one writer at a time (no concurrent memtable writes).
// An iterator over a memtable still written orders a copy of its entries,
// as the vector memtable does; a read-only memtable is ordered once and
// shared. Point lookups (DB::Get) go to a vector memtable kept beside the
// entries: RocksDB's LookupKey, which they take, is not in its public
// headers, and the store's point lookups are rare (bucket moves, small
// records of its own).
class SortedRunsMemTableFactory : public rocksdb::MemTableRepFactory {
 public:
  // Past this many runs the entries are sorted instead of merged.
  static constexpr size_t kMaxRunsToMerge = 64;

  static const char* kClassName() { return "StrataSortedRunsMemTable"; }
  const char* Name() const override { return kClassName(); }

  using rocksdb::MemTableRepFactory::CreateMemTableRep;
  rocksdb::MemTableRep* CreateMemTableRep(
      const rocksdb::MemTableRep::KeyComparator& compare,
      rocksdb::Allocator* allocator, const rocksdb::SliceTransform* transform,
      rocksdb::Logger* logger) override;
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_SORTED_RUNS_MEMTABLE_H_
