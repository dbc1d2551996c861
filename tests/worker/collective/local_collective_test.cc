#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "worker/collective/collective.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

TEST(LocalCollectiveTest, IsRankZeroOfOne) {
  std::unique_ptr<Collective> collective = CreateLocalCollective();
  EXPECT_EQ(collective->rank(), 0);
  EXPECT_EQ(collective->world_size(), 1);
  EXPECT_STREQ(collective->backend(), "local");
}

TEST(LocalCollectiveTest, OperationsLeaveTheDataAsItIs) {
  std::unique_ptr<Collective> collective = CreateLocalCollective();
  std::vector<float> data = {1.5f, -2.0f, 3.0f};
  ASSERT_THAT(collective->AllreduceSum(absl::MakeSpan(data)), IsOk());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  ASSERT_THAT(collective->Broadcast(absl::MakeSpan(data), 0), IsOk());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  EXPECT_THAT(collective->Barrier(), IsOk());
  EXPECT_THAT(collective->AllreduceSum(absl::Span<float>()), IsOk());
}

TEST(LocalCollectiveTest, BroadcastFromAnotherRootIsInvalid) {
  std::unique_ptr<Collective> collective = CreateLocalCollective();
  std::vector<float> data(2);
  EXPECT_THAT(collective->Broadcast(absl::MakeSpan(data), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata
