#include "common/hash.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

// The constants below were computed once, independently of this code (in
// Python, from the SplitMix64 and FNV-1a definitions). They decide where rows
// live and what their initial values are: a change here moves every key of
// every existing cluster, so it must never happen by accident.

TEST(HashTest, Mix64MatchesSplitMix64) {
  // The first output of SplitMix64 seeded with 0 (Vigna's reference).
  EXPECT_EQ(Mix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(Mix64(1), 0x910A2DEC89025CC1ull);
  EXPECT_EQ(Mix64(12345), 0x22118258A9D111A0ull);
  EXPECT_EQ(Mix64(0xFFFFFFFFFFFFFFFFull), 0xE4D971771B652C20ull);
}

TEST(HashTest, HashStringIsMixedFnv1a) {
  // FNV-1a("") is the offset basis and FNV-1a("a") is 0xAF63DC4C8601EC8C.
  EXPECT_EQ(HashString(""), Mix64(0xCBF29CE484222325ull));
  EXPECT_EQ(HashString("a"), Mix64(0xAF63DC4C8601EC8Cull));
  EXPECT_EQ(HashString(""), 0xC3817C016BA4FF30ull);
  EXPECT_EQ(HashString("a"), 0x5F29C2AADD9B8527ull);
  EXPECT_EQ(HashString("user"), 0x25DB21AE0302BF5Bull);
  EXPECT_EQ(HashString("item_embedding"), 0x4A25E3DA8EB68A39ull);
}

TEST(HashTest, HashStringUsesBytesNotSignedChars) {
  // Bytes >= 0x80 must hash as unsigned: FNV-1a of "\xff" xors 0xFF in.
  const uint64_t fnv = (0xCBF29CE484222325ull ^ 0xFFull) * 0x100000001B3ull;
  EXPECT_EQ(HashString("\xff"), Mix64(fnv));
}

TEST(HashTest, PlacementOfKnownKeysIsPinned) {
  const uint64_t user = HashString("user");
  const uint64_t item = HashString("item_embedding");
  EXPECT_EQ(HashTableKey(user, 0), 0xFB431516A6BE08EBull);
  EXPECT_EQ(BucketOf(user, 0), 2283u);
  EXPECT_EQ(BucketOf(user, 42), 2885u);
  EXPECT_EQ(BucketOf(item, 1234567890123ull), 1547u);
  EXPECT_EQ(DefaultBucketOwner(2283, 4), 3u);
  EXPECT_EQ(DefaultBucketOwner(2885, 4), 1u);
}

TEST(HashTest, BucketOfIsBelowNumBucketsAndSpreadsKeys) {
  EXPECT_EQ(kNumBuckets, 4096u);
  const uint64_t table = HashString("user");
  std::vector<int> counts(kNumBuckets, 0);
  constexpr int kKeys = 1 << 20;
  for (uint64_t key = 0; key < kKeys; ++key) {
    const uint32_t bucket = BucketOf(table, key);
    ASSERT_LT(bucket, kNumBuckets) << key;
    ++counts[bucket];
  }
  // 256 keys per bucket on average; sequential keys must not cluster.
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    EXPECT_GT(counts[b], 256 / 2) << b;
    EXPECT_LT(counts[b], 256 * 2) << b;
  }
  EXPECT_LT(BucketOf(table, ~uint64_t{0}), kNumBuckets);
}

TEST(HashTest, DefaultBucketOwnerIsBucketModShards) {
  for (uint32_t shards : {1u, 3u, 8u}) {
    for (uint32_t bucket = 0; bucket < kNumBuckets; ++bucket) {
      ASSERT_EQ(DefaultBucketOwner(bucket, shards), bucket % shards);
    }
  }
}

}  // namespace
}  // namespace strata
