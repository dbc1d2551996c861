#include "common/shard_map.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(ShardMapTest, ModuloIsVersionOneAndMatchesTheDefaultOwner) {
  const ShardMap map = ShardMap::Modulo(3);
  EXPECT_EQ(map.version(), 1u);
  EXPECT_EQ(map.num_shards(), 3u);
  ASSERT_EQ(map.owners().size(), kNumBuckets);
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    ASSERT_EQ(map.OwnerOf(b), DefaultBucketOwner(b, 3)) << b;
  }
  const uint64_t table = HashString("user");
  EXPECT_EQ(map.OwnerOfKey(table, 42),
            DefaultBucketOwner(BucketOf(table, 42), 3));
  EXPECT_EQ(map.BucketsOf(1).size(), 1365u);
  EXPECT_EQ(map.Summary(), "version 1, 3 shards (1366, 1365, 1365 buckets)");
}

TEST(ShardMapTest, WithOwnerMovesOneBucketAndBumpsTheVersion) {
  const ShardMap map = ShardMap::Modulo(2);
  absl::StatusOr<ShardMap> next = map.WithOwner(7, 0);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->version(), 2u);
  EXPECT_EQ(next->OwnerOf(7), 0u);
  EXPECT_EQ(map.OwnerOf(7), 1u);  // The original is unchanged.
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    if (b == 7) continue;
    ASSERT_EQ(next->OwnerOf(b), map.OwnerOf(b)) << b;
  }
  EXPECT_THAT(map.WithOwner(kNumBuckets, 0).status().message(),
              HasSubstr("bucket 4096 is outside 0..4095"));
  EXPECT_THAT(map.WithOwner(3, 2).status().message(),
              HasSubstr("shard 2 is outside 0..1"));
}

TEST(ShardMapTest, SerializeAndParseRoundTrip) {
  absl::StatusOr<ShardMap> map = ShardMap::Modulo(4).WithOwner(100, 3);
  ASSERT_TRUE(map.ok());
  map = map->WithOwner(4095, 0);
  ASSERT_TRUE(map.ok());
  const std::string text = map->Serialize();
  absl::StatusOr<ShardMap> parsed = ShardMap::Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *map);
  EXPECT_EQ(parsed->version(), 3u);
  // Runs keep the text small: modulo over 4 shards is the worst case.
  EXPECT_LT(text.size(), 4096u * 5);
}

TEST(ShardMapTest, AddressesRoundTripAndAreChecked) {
  std::vector<uint32_t> owners = ShardMap::Modulo(2).owners();
  absl::StatusOr<ShardMap> grown = ShardMap::Create(
      2, 3, owners, {"10.0.0.1:50051", "10.0.0.2:50051", "shard-2:50051"});
  ASSERT_TRUE(grown.ok()) << grown.status();
  absl::StatusOr<ShardMap> parsed = ShardMap::Parse(grown->Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *grown);
  EXPECT_EQ(parsed->addresses()[2], "shard-2:50051");
  EXPECT_TRUE(grown->BucketsOf(2).empty());
  // Kept by WithOwner; a map without them differs.
  EXPECT_EQ(grown->WithOwner(0, 2)->addresses(), grown->addresses());
  EXPECT_NE(*grown, *ShardMap::Create(2, 3, owners));
  EXPECT_THAT(ShardMap::Create(2, 3, owners, {"a:1", "b:2"}).status().message(),
              HasSubstr("2 addresses for 3 shards"));
  EXPECT_THAT(ShardMap::Create(2, 2, owners, {"a:1", "b 2"}).status().message(),
              HasSubstr("'b 2' is not host:port"));
  EXPECT_FALSE(
      ShardMap::Create(2, 2, owners, {"a:1", std::string(300, 'x') + ":1"})
          .ok());
}

TEST(ShardMapTest, ParseRefusesDamagedText) {
  const std::string text = ShardMap::Modulo(2).Serialize();
  // A flipped owner: the checksum no longer matches.
  std::string flipped =
      absl::StrReplaceAll(text, {{"owners=0*1,1*1", "owners=1*1,1*1"}});
  ASSERT_NE(flipped, text);
  EXPECT_THAT(ShardMap::Parse(flipped).status().message(),
              HasSubstr("crc32c does not match"));
  // Truncated: no checksum line.
  EXPECT_EQ(ShardMap::Parse(text.substr(0, text.size() / 2)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ShardMap::Parse("").status().code(), absl::StatusCode::kDataLoss);
}

TEST(ShardMapTest, CreateNamesWhatIsWrong) {
  std::vector<uint32_t> owners(kNumBuckets, 0);
  EXPECT_THAT(ShardMap::Create(0, 1, owners).status().message(),
              HasSubstr("version must be >= 1"));
  EXPECT_THAT(ShardMap::Create(1, 0, owners).status().message(),
              HasSubstr("no shards"));
  // More shards than buckets: refused before anything is sized by it.
  EXPECT_THAT(ShardMap::Create(1, 4000000000u, owners).status().message(),
              HasSubstr("4000000000 shards, over the 4096 buckets"));
  EXPECT_THAT(
      ShardMap::Create(1, 1, std::vector<uint32_t>(10, 0)).status().message(),
      HasSubstr("10 bucket owners, not 4096"));
  owners[9] = 5;
  EXPECT_THAT(ShardMap::Create(1, 2, owners).status().message(),
              HasSubstr("gives bucket 9 to shard 5, outside 0..1"));
  owners[9] = 1;
  EXPECT_TRUE(ShardMap::Create(1, 2, owners).ok());
}

TEST(ShardMapTest, MismatchErrorsCarryTheCurrentVersion) {
  const absl::Status refused = ShardMapMismatchError("routed by version 2", 5);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "routed by version 2");
  EXPECT_EQ(ShardMapVersionOf(refused), 5u);
  // Other refusals carry none, even FAILED_PRECONDITION.
  EXPECT_EQ(ShardMapVersionOf(absl::FailedPreconditionError("no table")),
            std::nullopt);
  EXPECT_EQ(ShardMapVersionOf(absl::OkStatus()), std::nullopt);
}

}  // namespace
}  // namespace strata
