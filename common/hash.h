#ifndef STRATA_COMMON_HASH_H_
#define STRATA_COMMON_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace strata {

// Stable hashes: the same on every process, machine and release, because
// they decide on which shard a row lives and what its initial value is.

// SplitMix64 finalizer: a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over the bytes of `text`, then mixed.
inline uint64_t HashString(absl::string_view text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return Mix64(h);
}

// hash64(table, key) of the design: placement of a key of a table.
inline uint64_t HashTableKey(uint64_t table_hash, uint64_t key) {
  return Mix64(key ^ table_hash);
}

// Number of virtual buckets keys are placed in; fixed for a cluster's life.
inline constexpr uint32_t kNumBuckets = 4096;

inline uint32_t BucketOf(uint64_t table_hash, uint64_t key) {
  return static_cast<uint32_t>(HashTableKey(table_hash, key) % kNumBuckets);
}

// The default shard map: bucket b belongs to shard b mod num_shards.
inline uint32_t DefaultBucketOwner(uint32_t bucket, uint32_t num_shards) {
  return bucket % num_shards;
}

}  // namespace strata

#endif  // STRATA_COMMON_HASH_H_
