#include "embedding/internal/push_deduplicator.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace strata {
namespace embedding_internal {
namespace {

using ::testing::UnorderedElementsAre;

TEST(PushDeduplicatorTest, InOrderClientKeepsOnlyItsFloor) {
  testing::FakeClock clock;
  PushDeduplicator windows(&clock);
  for (uint64_t sequence = 1; sequence <= 5000; ++sequence) {
    ASSERT_TRUE(windows.Claim("trainer", sequence));
  }
  // Every sequence up to 5000 is under the floor: one uint64 on disk.
  EXPECT_EQ(windows.SerializeWindow("trainer").size(), sizeof(uint64_t));
  EXPECT_FALSE(windows.Claim("trainer", 1));
  EXPECT_FALSE(windows.Claim("trainer", 5000));
  EXPECT_TRUE(windows.Claim("trainer", 5001));
}

TEST(PushDeduplicatorTest, GapsStayUntilFilled) {
  testing::FakeClock clock;
  PushDeduplicator windows(&clock);
  ASSERT_TRUE(windows.Claim("c", 1));
  ASSERT_TRUE(windows.Claim("c", 3));
  ASSERT_TRUE(windows.Claim("c", 4));
  // Floor 1, then 3 and 4.
  EXPECT_EQ(windows.SerializeWindow("c").size(), 3 * sizeof(uint64_t));
  EXPECT_TRUE(windows.Claim("c", 2));
  EXPECT_FALSE(windows.Claim("c", 3));
  EXPECT_EQ(windows.SerializeWindow("c").size(), sizeof(uint64_t));
}

TEST(PushDeduplicatorTest, SerializeWindowWithMatchesAClaim) {
  testing::FakeClock clock;
  PushDeduplicator windows(&clock);
  ASSERT_TRUE(windows.Claim("c", 1));
  ASSERT_TRUE(windows.Claim("c", 5));
  const std::string predicted = windows.SerializeWindowWith("c", 2);
  EXPECT_FALSE(windows.Applied("c", 2));
  windows.ClaimPersisted("c", 2);
  EXPECT_TRUE(windows.Applied("c", 2));
  EXPECT_EQ(windows.SerializeWindow("c"), predicted);
}

TEST(PushDeduplicatorTest, IdleWindowsExpireAndTheLeastRecentlyUsedGoFirst) {
  testing::FakeClock clock;
  PushDeduplicator windows(&clock);
  ASSERT_TRUE(windows.Claim("old", 1));
  clock.Advance(absl::Minutes(30));
  ASSERT_TRUE(windows.Claim("a", 1));
  clock.Advance(absl::Minutes(1));
  ASSERT_TRUE(windows.Claim("b", 1));
  clock.Advance(absl::Minutes(1));
  ASSERT_TRUE(windows.Claim("c", 1));
  clock.Advance(absl::Minutes(29));
  // "old" is 61 minutes idle; of the rest, two may stay: "a" goes.
  EXPECT_THAT(windows.Expire(absl::Hours(1), 2),
              UnorderedElementsAre("old", "a"));
  EXPECT_EQ(windows.size(), 2u);
  // A forgotten client's retry is applied again (the documented bound).
  EXPECT_TRUE(windows.Claim("old", 1));
  EXPECT_FALSE(windows.Claim("b", 1));
}

TEST(PushDeduplicatorTest, ManyClientsStayBoundedByExpire) {
  testing::FakeClock clock;
  PushDeduplicator windows(&clock);
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(windows.Claim(absl::StrCat("client-", i), 1));
  }
  EXPECT_EQ(windows.Expire(absl::Hours(1), 1000).size(), 19000u);
  EXPECT_EQ(windows.size(), 1000u);
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
