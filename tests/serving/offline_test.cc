// strata-serving loading a training cluster's checkpoint, with the training
// cluster stopped.

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/server_process.h"
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

// A checkpoint of two shards (full, then incremental), resharded offline
// with stratactl onto three new shards: they serve the live rows at the
// checkpoint, restore it again on request, and strata-serving loads the new
// checkpoint in offline mode.
TEST(OfflineServingTest, ACheckpointOfTwoShardsRunsOnThreeNewShards) {
  ServingTestCluster cluster(2);
  ASSERT_THAT(cluster.StartTraining(), IsOk());
  ASSERT_THAT(cluster.training().CreateTable(SgdTable("user", kDim)), IsOk());
  std::mt19937_64 random(29);
  std::set<uint64_t> touched_set;
  auto push_some = [&](int batches, float gradient) {
    for (int b = 0; b < batches; ++b) {
      std::vector<uint64_t> keys(64);
      for (uint64_t& key : keys) key = random() % 3000;
      std::vector<float> gradients(keys.size() * kDim, gradient);
      ASSERT_THAT(cluster.training().Push("user", keys, gradients), IsOk());
      touched_set.insert(keys.begin(), keys.end());
    }
  };
  push_some(10, 0.5f);
  ASSERT_THAT(cluster.training().Checkpoint("full", 7), IsOk());
  push_some(10, -1.5f);
  ASSERT_THAT(cluster.training().Checkpoint("inc", 8, /*incremental=*/true),
              IsOk());
  const std::vector<uint64_t> touched(touched_set.begin(), touched_set.end());
  absl::StatusOr<std::vector<float>> at_checkpoint =
      cluster.Pull("user", touched, kDim);
  ASSERT_THAT(at_checkpoint, IsOk());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<testing::ProcessExit> exit = cluster.shard(i).Terminate();
    ASSERT_THAT(exit, IsOk());
    ASSERT_EQ(exit->exit_code, 0);
  }

  testing::TempDir new_dirs("reshard");
  std::vector<std::string> targets;
  for (int t = 0; t < 3; ++t) {
    targets.push_back(absl::StrCat(new_dirs.path(), "/shard", t));
  }
  testing::ServerProcessOptions tool;
  tool.binary = "stratactl";
  tool.daemon_flags = false;
  // Listed out of order: the recorded placements say so, and nothing is
  // written.
  tool.flags = {"reshard-checkpoint", "inc",
                absl::StrCat("--from=", cluster.shard(1).data_dir(), ",",
                             cluster.shard(0).data_dir()),
                absl::StrCat("--to=", absl::StrJoin(targets, ","))};
  testing::ServerProcess swapped(tool);
  ASSERT_THAT(swapped.Launch(), IsOk());
  absl::StatusOr<testing::ProcessExit> refused =
      swapped.Wait(absl::Seconds(60));
  ASSERT_THAT(refused, IsOk());
  EXPECT_EQ(refused->exit_code, 2);
  EXPECT_THAT(swapped.log(),
              ::testing::HasSubstr("holds shard 1 of 2 (bucket map version 1) "
                                   "but is listed as shard 0 of 2"));
  tool.flags = {"reshard-checkpoint", "inc",
                absl::StrCat("--from=", cluster.shard(0).data_dir(), ",",
                             cluster.shard(1).data_dir()),
                absl::StrCat("--to=", absl::StrJoin(targets, ","))};
  testing::ServerProcess reshard(tool);
  ASSERT_THAT(reshard.Launch(), IsOk());
  absl::StatusOr<testing::ProcessExit> resharded =
      reshard.Wait(absl::Seconds(60));
  ASSERT_THAT(resharded, IsOk());
  ASSERT_EQ(resharded->exit_code, 0) << reshard.log();
  EXPECT_THAT(reshard.log(), ::testing::HasSubstr("from 2 shards (rows "));

  std::vector<std::unique_ptr<testing::ServerProcess>> shards;
  PsClientOptions options;
  for (int t = 0; t < 3; ++t) {
    testing::ServerProcessOptions shard;
    shard.data_dir = targets[t];
    shard.flags = {"--num_shards=3", absl::StrCat("--shard_index=", t),
                   "--durability=group"};
    shards.push_back(std::make_unique<testing::ServerProcess>(shard));
    ASSERT_THAT(shards.back()->Start(), IsOk());
    options.shard_addresses.push_back(shards.back()->address());
  }
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client, IsOk());
  std::vector<float> rows(touched.size() * kDim);
  ASSERT_THAT((*client)->Pull("user", touched, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(*at_checkpoint));
  // A worker's --restore restores the checkpoint id on every shard.
  const std::vector<float> later(touched.size() * kDim, 3.0f);
  ASSERT_THAT((*client)->Push("user", touched, later), IsOk());
  absl::StatusOr<std::vector<v1::RestoreResponse>> restored =
      (*client)->Restore("inc");
  ASSERT_THAT(restored, IsOk());
  ASSERT_EQ(restored->size(), 3u);
  EXPECT_EQ((*restored)[0].global_step(), 8u);
  ASSERT_THAT((*client)->Pull("user", touched, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(*at_checkpoint));

  std::vector<std::string> checkpoint_dirs;
  for (const std::string& dir : targets) {
    checkpoint_dirs.push_back(dir + "/checkpoints/inc");
  }
  ASSERT_THAT(cluster.StartServing({absl::StrCat(
                  "--checkpoint_dirs=", absl::StrJoin(checkpoint_dirs, ","))}),
              IsOk());
  absl::StatusOr<std::vector<float>> served =
      cluster.Lookup("user", touched, kDim);
  ASSERT_THAT(served, IsOk());
  EXPECT_THAT(*served, ElementsAreArray(*at_checkpoint));
}

}  // namespace
}  // namespace strata
