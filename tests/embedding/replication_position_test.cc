// The replication position a store writes with each replicated push: what a
// replica knows after a restart about how far it got.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::TempDir;

class ReplicationPositionTest : public ::testing::TestWithParam<Durability> {
 protected:
  void Open() {
    store_.reset();
    EmbeddingStoreOptions options;
    options.data_dir = dir_.path() + "/store";
    options.durability = GetParam();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    ASSERT_THAT(store.status(), IsOk());
    store_ = *std::move(store);
  }

  void SetUp() override {
    Open();
    EmbeddingTableConfig config;
    config.name = "t";
    config.dim = 1;
    config.initializer.type = InitializerType::kZeros;
    config.optimizer.type = OptimizerType::kSgd;
    config.optimizer.learning_rate = 1.0f;
    ASSERT_THAT(store_->CreateTable(config).status(), IsOk());
  }

  absl::StatusOr<bool> Push(const std::string& client, uint64_t sequence,
                            ReplicationPosition position) {
    const std::vector<FeatureId> keys = {1};
    const std::vector<float> gradients = {-1.0f};
    GradientBatch batch{"t", keys, gradients, 0};
    return store_->ApplyGradients({&batch, 1},
                                  PushId{client, sequence, position});
  }

  TempDir dir_{"replication_position"};
  std::unique_ptr<EmbeddingStore> store_;
};

TEST_P(ReplicationPositionTest, NewStoreStandsAtZero) {
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{}));
}

TEST_P(ReplicationPositionTest, PushRecordsItsPositionAcrossARestart) {
  ASSERT_THAT(Push("c", 1, {5, 1}), IsOkAndHolds(false));
  ASSERT_THAT(Push("c", 2, {5, 2}), IsOkAndHolds(false));
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{5, 2}));
  Open();
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{5, 2}));
}

TEST_P(ReplicationPositionTest, DuplicatePushRecordsNothing) {
  ASSERT_THAT(Push("c", 1, {5, 1}), IsOkAndHolds(false));
  ASSERT_THAT(Push("c", 1, {7, 9}), IsOkAndHolds(true));
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{5, 1}));
}

TEST_P(ReplicationPositionTest, UnreplicatedPushLeavesThePosition) {
  ASSERT_THAT(Push("c", 1, {5, 1}), IsOkAndHolds(false));
  ASSERT_THAT(Push("c", 2, {}), IsOkAndHolds(false));
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{5, 1}));
}

TEST_P(ReplicationPositionTest, CheckpointCarriesThePositionIntoARestore) {
  ASSERT_THAT(Push("c", 1, {5, 1}), IsOkAndHolds(false));
  ASSERT_THAT(store_->Checkpoint("at-1", 0).status(), IsOk());
  ASSERT_THAT(Push("c", 2, {5, 2}), IsOkAndHolds(false));
  ASSERT_THAT(store_->Restore("at-1").status(), IsOk());
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{5, 1}));
  ASSERT_THAT(store_->RecordReplicationPosition({6, 3}), IsOk());
  Open();
  EXPECT_THAT(store_->ReadReplicationPosition(),
              IsOkAndHolds(ReplicationPosition{6, 3}));
}

INSTANTIATE_TEST_SUITE_P(SyncAndGroup, ReplicationPositionTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup));

}  // namespace
}  // namespace strata
