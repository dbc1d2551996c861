#ifndef STRATA_EMBEDDING_INTERNAL_SORT_ON_READ_MEMTABLE_H_
#define STRATA_EMBEDDING_INTERNAL_SORT_ON_READ_MEMTABLE_H_

#include <memory>

#include "rocksdb/memtablerep.h"

namespace strata {
namespace embedding_internal {

// A RocksDB memtable for the store's column families, which are written in
// large batches and read back only by iterators (flushes, recovery,
// checkpoints). Entries are appended as they come, with no search per
// insert (as RocksDB's VectorRep does), and sorted once when the memtable
// is first read after it became immutable (a copy is sorted for each
// iterator before that).
//
// The sort is what differs from VectorRep: VectorRep sorts the entries'
// addresses with RocksDB's key comparator, so each comparison decodes two
// entries wherever they lie in the arena (a cache miss each), which made
// the sort at a flush a quarter of a group-durability shard's CPU. Here
// each entry is decoded once, into a flat array holding its user key's
// first 16 bytes (big-endian), the key's length and its sequence, and that
// array is sorted; RocksDB's comparator decides only between keys longer
// than 16 bytes whose first 16 bytes are equal.
//
// REQUIRES: the column family's comparator is RocksDB's bytewise one (the
// default). Not for point lookups: a Get sorts a copy of a mutable
// memtable, as VectorRep's does.
std::shared_ptr<rocksdb::MemTableRepFactory> NewSortOnReadMemTableFactory();

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_SORT_ON_READ_MEMTABLE_H_
