// BucketMoveSource: the tracking of pushes to moving buckets, the write
// pause and its limit, and when a map may give the buckets away.

#include "server/internal/bucket_move_source.h"

#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "common/logging.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace server_internal {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kTable[] = "ads";

// Keys 1.. whose bucket is `bucket`'s (or not).
std::vector<uint64_t> KeysIn(uint32_t bucket, bool inside, size_t n) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; keys.size() < n; ++key) {
    if ((BucketOf(HashString(kTable), key) == bucket) == inside) {
      keys.push_back(key);
    }
  }
  return keys;
}

google::protobuf::RepeatedPtrField<v1::TableBatch> Batches(
    const std::vector<uint64_t>& keys) {
  google::protobuf::RepeatedPtrField<v1::TableBatch> batches;
  v1::TableBatch* batch = batches.Add();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(keys.begin(), keys.end());
  return batches;
}

class BucketMoveSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    moving_ = BucketOf(HashString(kTable), 1);
    BucketSet buckets;
    buckets[moving_] = true;
    source_.Begin("m1", buckets, /*target=*/1);
  }
  // The map giving the moving bucket (owned by shard 0) to shard 1.
  ShardMap GivingAway() const {
    std::vector<uint32_t> owners(kNumBuckets, 0);
    owners[moving_] = 1;
    return *ShardMap::Create(2, 2, owners);
  }
  ShardMap Current() const {
    return *ShardMap::Create(1, 2, std::vector<uint32_t>(kNumBuckets, 0));
  }

  testing::FakeClock clock_;
  BucketMoveSource source_{&clock_, absl::Seconds(10)};
  uint32_t moving_ = 0;
};

TEST_F(BucketMoveSourceTest, TracksOnlyKeysOfMovingBucketsUntilTaken) {
  const std::vector<uint64_t> in = KeysIn(moving_, true, 3);
  source_.RecordPush(Batches(KeysIn(moving_, false, 50)));
  source_.RecordPush(Batches(in));
  source_.RecordPush(Batches(in));  // counted once
  uint64_t left = 99;
  std::vector<PendingKeys> first = source_.TakePending(2, &left);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].table, kTable);
  EXPECT_EQ(first[0].keys.size(), 2u);
  EXPECT_EQ(left, 1u);
  // Keys given back (their rows did not arrive) come again.
  source_.Requeue(first[0]);
  std::vector<PendingKeys> all = source_.TakePending(10, &left);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].keys, in);
  EXPECT_EQ(left, 0u);
}

TEST_F(BucketMoveSourceTest,
       PausedWritesAreRefusedUntilTheLimitThenTheMoveIsVoid) {
  const auto in = Batches(KeysIn(moving_, true, 1));
  const auto out = Batches(KeysIn(moving_, false, 20));
  EXPECT_THAT(source_.CheckPush(in), IsOk());
  // Not paused and not caught up: the buckets may not leave.
  EXPECT_THAT(
      source_.CheckGiveAway(Current(), GivingAway(), 0),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not paused")));
  ASSERT_THAT(source_.Pause("m1"), IsOk());
  EXPECT_THAT(source_.CheckPush(in),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("retry")));
  EXPECT_THAT(source_.CheckPush(out), IsOk());
  EXPECT_THAT(source_.CheckGiveAway(Current(), GivingAway(), 0), IsOk());
  // A key pushed before the pause and not taken yet holds the map back.
  source_.RecordPush(in);
  EXPECT_THAT(source_.CheckGiveAway(Current(), GivingAway(), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("1 updated keys")));
  uint64_t left = 0;
  source_.TakePending(10, &left);

  // The driver died: past the limit writes resume, and the move is void.
  clock_.Advance(absl::Seconds(11));
  EXPECT_THAT(source_.CheckPush(in), IsOk());
  EXPECT_THAT(source_.CheckGiveAway(Current(), GivingAway(), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("pause ran out")));
  EXPECT_THAT(source_.Pause("m1"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("begin the move again")));
  // Beginning it again starts clean.
  BucketSet buckets;
  buckets[moving_] = true;
  source_.Begin("m2", buckets, 1);
  ASSERT_THAT(source_.Pause("m2"), IsOk());
  EXPECT_THAT(source_.CheckGiveAway(Current(), GivingAway(), 0), IsOk());
}

TEST_F(BucketMoveSourceTest, EndReportsThePauseAndOtherMovesAreRefused) {
  EXPECT_THAT(source_.BucketsOf("other"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("move 'm1' is")));
  EXPECT_THAT(source_.Pause("other"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(source_.Pause("m1"), IsOk());
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_EQ(source_.End("other"), absl::ZeroDuration());
  EXPECT_EQ(source_.End("m1"), absl::Milliseconds(30));
  // Over: nothing is refused or held back any more.
  EXPECT_THAT(source_.CheckPush(Batches(KeysIn(moving_, true, 1))), IsOk());
  EXPECT_THAT(source_.CheckGiveAway(Current(), GivingAway(), 0), IsOk());
  EXPECT_THAT(source_.BucketsOf("m1"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace server_internal
}  // namespace strata
