#ifndef STRATA_EMBEDDING_REPLICATION_POSITION_H_
#define STRATA_EMBEDDING_REPLICATION_POSITION_H_

#include <cstdint>

namespace strata {

// Where an update stands in its replica group's log: the term of the
// primary that numbered it (the etcd revision that made it primary) and its
// sequence. Ordered by term, then sequence. Zero: not replicated.
struct ReplicationPosition {
  uint64_t term = 0;
  uint64_t sequence = 0;
  friend bool operator==(const ReplicationPosition& a,
                         const ReplicationPosition& b) {
    return a.term == b.term && a.sequence == b.sequence;
  }
  friend bool operator!=(const ReplicationPosition& a,
                         const ReplicationPosition& b) {
    return !(a == b);
  }
  friend bool operator<(const ReplicationPosition& a,
                        const ReplicationPosition& b) {
    return a.term != b.term ? a.term < b.term : a.sequence < b.sequence;
  }
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_REPLICATION_POSITION_H_
