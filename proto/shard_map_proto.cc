#include "proto/shard_map_proto.h"

#include <string>
#include <vector>

namespace strata {

v1::ShardMap ShardMapToProto(const ShardMap& map) {
  v1::ShardMap proto;
  proto.set_version(map.version());
  proto.set_num_shards(map.num_shards());
  proto.mutable_bucket_owners()->Add(map.owners().begin(), map.owners().end());
  for (const std::string& address : map.addresses()) {
    proto.add_shard_addresses(address);
  }
  return proto;
}

absl::StatusOr<ShardMap> ShardMapFromProto(const v1::ShardMap& proto) {
  return ShardMap::Create(
      proto.version(), proto.num_shards(),
      std::vector<uint32_t>(proto.bucket_owners().begin(),
                            proto.bucket_owners().end()),
      std::vector<std::string>(proto.shard_addresses().begin(),
                               proto.shard_addresses().end()));
}

}  // namespace strata
