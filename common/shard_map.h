#ifndef STRATA_COMMON_SHARD_MAP_H_
#define STRATA_COMMON_SHARD_MAP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"

namespace strata {

// Which shard owns each of the kNumBuckets virtual buckets, under a version
// that grows by one with every change. Clients route keys by it
// (bucket = BucketOf(table, key), shard = OwnerOf(bucket)); a shard refuses a
// request routed by an older version. Immutable; cheap to share.
//
// Example:
//   ShardMap map = ShardMap::Modulo(2);   // version 1: b -> b mod 2
//   absl::StatusOr<ShardMap> next = map.WithOwner(/*bucket=*/7, /*shard=*/0);
//   next->version();                       // 2
class ShardMap {
 public:
  // The map a cluster of `num_shards` (>= 1) starts with: version 1, bucket
  // b owned by shard b mod num_shards.
  static ShardMap Modulo(uint32_t num_shards);
  // INVALID_ARGUMENT naming what is wrong unless version >= 1,
  // 1 <= num_shards <= kNumBuckets, `owners` has kNumBuckets entries, each
  // below num_shards.
  // `addresses`: empty, or each shard's host:port (num_shards entries), for
  // clients to reach shards added after they started.
  static absl::StatusOr<ShardMap> Create(
      uint64_t version, uint32_t num_shards, std::vector<uint32_t> owners,
      std::vector<std::string> addresses = {});

  uint64_t version() const { return version_; }
  uint32_t num_shards() const { return num_shards_; }
  uint32_t OwnerOf(uint32_t bucket) const { return owners_[bucket]; }
  uint32_t OwnerOfKey(uint64_t table_hash, uint64_t key) const {
    return owners_[BucketOf(table_hash, key)];
  }
  // kNumBuckets entries: the owner of each bucket.
  const std::vector<uint32_t>& owners() const { return owners_; }
  // Empty, or the host:port of each shard.
  const std::vector<std::string>& addresses() const { return addresses_; }
  // The buckets `shard` owns, in increasing order.
  std::vector<uint32_t> BucketsOf(uint32_t shard) const;

  // The next version, with `bucket` owned by `shard` (INVALID_ARGUMENT for a
  // bucket or shard out of range).
  absl::StatusOr<ShardMap> WithOwner(uint32_t bucket, uint32_t shard) const;

  // Text form kept in a shard's data directory and in etcd: "name=value"
  // lines (version, num_shards, owners as runs "shard*count,...", the
  // addresses when known, and a crc32c of the lines before it). Parse gives
  // DATA_LOSS naming what is wrong for a damaged or truncated text.
  std::string Serialize() const;
  static absl::StatusOr<ShardMap> Parse(absl::string_view text);

  // "version 3, 2 shards (2048, 2048 buckets)".
  std::string Summary() const;

  bool operator==(const ShardMap& other) const {
    return version_ == other.version_ && num_shards_ == other.num_shards_ &&
           owners_ == other.owners_ && addresses_ == other.addresses_;
  }
  bool operator!=(const ShardMap& other) const { return !(*this == other); }

 private:
  ShardMap(uint64_t version, uint32_t num_shards, std::vector<uint32_t> owners,
           std::vector<std::string> addresses = {})
      : version_(version),
        num_shards_(num_shards),
        owners_(std::move(owners)),
        addresses_(std::move(addresses)) {}

  uint64_t version_;
  uint32_t num_shards_;
  std::vector<uint32_t> owners_;
  std::vector<std::string> addresses_;
};

// A shard's refusal of a request routed by another shard map carries the
// shard's current map version: as an absl::Status payload under
// kShardMapVersionPayload in the process, and on the wire as the trailing
// metadata kShardMapVersionMetadata (decimal), so that clients know to fetch
// the map again and re-route.
inline constexpr char kShardMapVersionPayload[] =
    "type.googleapis.com/strata.v1.ShardMapVersion";
inline constexpr char kShardMapVersionMetadata[] = "strata-shard-map-version";

// FAILED_PRECONDITION with `message` and the payload.
absl::Status ShardMapMismatchError(absl::string_view message,
                                   uint64_t current_version);
// The version a refusal carries; nullopt for any other status.
std::optional<uint64_t> ShardMapVersionOf(const absl::Status& status);

}  // namespace strata

#endif  // STRATA_COMMON_SHARD_MAP_H_
