#ifndef STRATA_COMMON_REPLICA_LAG_H_
#define STRATA_COMMON_REPLICA_LAG_H_

#include <cstdint>

namespace strata {

// Updates a follower replica is behind its primary: the primary's sequence
// minus the follower's acknowledged one, 0 when the follower's report is
// newer than the primary's (the two are read at different moments).
inline uint64_t ReplicaLag(uint64_t primary_sequence,
                           uint64_t follower_sequence) {
  return primary_sequence >= follower_sequence
             ? primary_sequence - follower_sequence
             : 0;
}

}  // namespace strata

#endif  // STRATA_COMMON_REPLICA_LAG_H_
