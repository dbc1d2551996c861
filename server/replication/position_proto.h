#ifndef STRATA_SERVER_REPLICATION_POSITION_PROTO_H_
#define STRATA_SERVER_REPLICATION_POSITION_PROTO_H_

#include "embedding/embedding_store.h"
#include "proto/replication.pb.h"

namespace strata {

// A replication position between the engine's struct and the wire.
inline ReplicationPosition PositionFromProto(
    const v1::ReplicationPosition& position) {
  return ReplicationPosition{position.term(), position.sequence()};
}

inline void PositionToProto(const ReplicationPosition& position,
                            v1::ReplicationPosition* out) {
  out->set_term(position.term);
  out->set_sequence(position.sequence);
}

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_POSITION_PROTO_H_
