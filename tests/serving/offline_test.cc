// strata-serving loading a training cluster's checkpoint, with the training
// cluster stopped.

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServingTestCluster;
using ::strata::testing::SgdTable;
using ::strata::testing::StatusIs;
using ::testing::ElementsAreArray;

constexpr uint32_t kDim = 4;

TEST(OfflineServingTest, ServesTheCheckpointedValuesWithTrainingStopped) {
  ServingTestCluster cluster(2);
  ASSERT_THAT(cluster.StartTraining(), IsOk());
  ASSERT_THAT(cluster.training().CreateTable(SgdTable("user", kDim)), IsOk());
  ASSERT_THAT(cluster.training().CreateTable(SgdTable("item", 2)), IsOk());
  std::mt19937_64 random(11);
  std::set<uint64_t> touched_set;
  auto push_some = [&](int batches, float gradient) {
    for (int b = 0; b < batches; ++b) {
      std::vector<uint64_t> keys(32);
      for (uint64_t& key : keys) key = random() % 400;
      std::vector<float> gradients(keys.size() * kDim, gradient);
      ASSERT_THAT(cluster.training().Push("user", keys, gradients), IsOk());
      std::vector<float> item_gradients(keys.size() * 2, gradient);
      ASSERT_THAT(cluster.training().Push("item", keys, item_gradients),
                  IsOk());
      touched_set.insert(keys.begin(), keys.end());
    }
  };
  push_some(10, 0.5f);
  ASSERT_THAT(cluster.training().Checkpoint("offline-1", 7), IsOk());
  const std::vector<uint64_t> touched(touched_set.begin(), touched_set.end());
  absl::StatusOr<std::vector<float>> checkpointed =
      cluster.Pull("user", touched, kDim);
  ASSERT_THAT(checkpointed, IsOk());
  // A key never pushed: its initial value, for --unknown_keys=initializer.
  const std::vector<uint64_t> fresh = {987654321};
  absl::StatusOr<std::vector<float>> initial =
      cluster.Pull("user", fresh, kDim);
  ASSERT_THAT(initial, IsOk());
  push_some(5, -2.0f);  // After the checkpoint: not served.
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<testing::ProcessExit> exit = cluster.shard(i).Terminate();
    ASSERT_THAT(exit, IsOk());
    ASSERT_EQ(exit->exit_code, 0);
  }

  ASSERT_THAT(
      cluster.StartServing(
          {absl::StrCat("--checkpoint_dirs=", cluster.shard(0).data_dir(),
                        "/checkpoints/offline-1,", cluster.shard(1).data_dir(),
                        "/checkpoints/offline-1"),
           "--tables=user", "--unknown_keys=initializer"}),
      IsOk());
  absl::StatusOr<v1::ServingStatusResponse> status = cluster.client().Status();
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->mode(), "offline");
  ASSERT_EQ(status->tables_size(), 1);
  EXPECT_EQ(status->tables(0).config().name(), "user");
  EXPECT_EQ(status->tables(0).num_rows(), touched.size());
  absl::StatusOr<std::vector<float>> served =
      cluster.Lookup("user", touched, kDim);
  ASSERT_THAT(served, IsOk());
  EXPECT_THAT(*served, ElementsAreArray(*checkpointed));
  absl::StatusOr<std::vector<float>> served_fresh =
      cluster.Lookup("user", fresh, kDim);
  ASSERT_THAT(served_fresh, IsOk());
  EXPECT_THAT(*served_fresh, ElementsAreArray(*initial));
  // --tables left "item" out.
  std::vector<float> row(2);
  EXPECT_THAT(cluster.client().Lookup("item", fresh, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(OfflineServingTest, AnIncrementalCheckpointIsRefusedNamingWhy) {
  ServingTestCluster cluster(1);
  ASSERT_THAT(cluster.StartTraining(), IsOk());
  ASSERT_THAT(cluster.training().CreateTable(SgdTable("user", kDim)), IsOk());
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> gradients(keys.size() * kDim, 0.5f);
  ASSERT_THAT(cluster.training().Push("user", keys, gradients), IsOk());
  ASSERT_THAT(cluster.training().Checkpoint("full", 1), IsOk());
  ASSERT_THAT(cluster.training().Push("user", keys, gradients), IsOk());
  ASSERT_THAT(cluster.training().Checkpoint("delta", 2, /*incremental=*/true),
              IsOk());
  ASSERT_THAT(cluster.shard(0).Terminate(), IsOk());
  EXPECT_THAT(
      cluster.StartServing(
          {absl::StrCat("--checkpoint_dirs=", cluster.shard(0).data_dir(),
                        "/checkpoints/delta")}),
      StatusIs(absl::StatusCode::kInternal,
               ::testing::HasSubstr("is incremental (it builds on 'full')")));
}

}  // namespace
}  // namespace strata
