#ifndef STRATA_PROTO_SHARD_MAP_PROTO_H_
#define STRATA_PROTO_SHARD_MAP_PROTO_H_

#include "absl/status/statusor.h"
#include "common/shard_map.h"
#include "proto/strata.pb.h"

namespace strata {

v1::ShardMap ShardMapToProto(const ShardMap& map);
// INVALID_ARGUMENT naming what is wrong (as ShardMap::Create).
absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto);

}  // namespace strata

#endif  // STRATA_PROTO_SHARD_MAP_PROTO_H_
