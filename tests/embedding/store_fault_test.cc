// The store under a failing disk (tests/testing/fault_injection_fs.h): what
// was acknowledged survives the fault and a restart, what failed is visible
// nowhere (memory, change stream, push windows), and the failure is
// reported until a write works again.

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/system_memory.h"
#include "embedding/embedding_store.h"
#include "embedding/table_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fault_injection_fs.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::FaultInjectionFileSystem;
using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::strata::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint32_t kDim = 4;

EmbeddingTableConfig SgdTable(float learning_rate = 0.5f) {
  EmbeddingTableConfig config;
  config.name = "ads";
  config.dim = kDim;
  config.seed = 7;
  config.initializer.type = InitializerType::kConstant;
  config.initializer.value = 0.0f;
  config.optimizer.type = OptimizerType::kSgd;
  config.optimizer.learning_rate = learning_rate;
  return config;
}

std::vector<FeatureId> Keys(FeatureId first, size_t count) {
  std::vector<FeatureId> keys(count);
  for (size_t i = 0; i < count; ++i) keys[i] = first + i;
  return keys;
}

class StoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    std::string pattern = ::testing::TempDir() + "strata_fault_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    temp_dir_ = pattern;
    env_ = faults_->NewEnv();
  }

  void TearDown() override {
    faults_->Heal();
    store_.reset();
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
  }

  absl::Status Open(Durability durability) {
    store_.reset();
    EmbeddingStoreOptions options;
    options.data_dir = temp_dir_ + "/data";
    options.durability = durability;
    options.flush_interval = absl::Hours(1);  // Flush() only
    options.rocksdb_env = env_.get();
    options.max_unwritten_rows = max_unwritten_rows_;
    options.clock = &clock_;
    options.max_push_windows = 2;
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    if (!store.ok()) return store.status();
    store_ = std::move(store).value();
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Push(absl::Span<const FeatureId> keys, float gradient,
                            const PushId& id = {}) {
    std::vector<float> gradients(keys.size() * kDim, gradient);
    GradientBatch batch{"ads", keys, gradients};
    return store_->ApplyGradients({batch}, id);
  }

  std::vector<float> Pull(absl::Span<const FeatureId> keys) {
    std::vector<float> values(keys.size() * kDim);
    EXPECT_THAT(store_->Lookup("ads", keys, absl::MakeSpan(values)), IsOk());
    return values;
  }

  bool FlushSucceedsSoon() {
    return WaitUntil([&] { return store_->Flush().ok(); }, absl::Seconds(60),
                     absl::Milliseconds(100));
  }

  std::shared_ptr<FaultInjectionFileSystem> faults_ =
      std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env_;
  std::string temp_dir_;
  uint64_t max_unwritten_rows_ = uint64_t{1} << 22;
  testing::FakeClock clock_;
  std::unique_ptr<EmbeddingStore> store_;
};

TEST_F(StoreFaultTest, FailedPeriodicFlushKeepsRowsReportsAndRetries) {
  ASSERT_THAT(Open(Durability::kPeriodic), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOkAndHolds(true));
  const std::vector<FeatureId> keys = Keys(1, 100);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOkAndHolds(false));

  faults_->FailWrites(/*after=*/0, /*no_space=*/true);
  EXPECT_THAT(store_->Flush(), StatusIs(absl::StatusCode::kResourceExhausted,
                                        HasSubstr("flush of 100 rows failed")));
  StorageStats stats = store_->GetStorageStats();
  EXPECT_EQ(stats.unwritten_rows, 100u);
  EXPECT_GE(stats.failed_writes, 1u);
  EXPECT_THAT(stats.write_error, HasSubstr("injected fault"));
  // Nothing may claim the rows are written while they are not.
  EXPECT_THAT(store_->Flush(), Not(IsOk()));
  EXPECT_THAT(store_->Checkpoint("during-fault", 1), Not(IsOk()));
  // Pushes acknowledged during the fault are kept too.
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 2}), IsOkAndHolds(false));
  const std::vector<float> acknowledged = Pull(keys);
  EXPECT_FLOAT_EQ(acknowledged[0], -1.0f);

  faults_->Heal();
  // A full disk: RocksDB resumes by itself once space is free.
  EXPECT_TRUE(FlushSucceedsSoon());
  stats = store_->GetStorageStats();
  EXPECT_EQ(stats.unwritten_rows, 0u);
  EXPECT_EQ(stats.write_error, "");
  ASSERT_THAT(store_->Checkpoint("after-fault", 2), IsOk());

  ASSERT_THAT(Open(Durability::kPeriodic), IsOk());
  EXPECT_EQ(Pull(keys), acknowledged);
  // The push windows were written again too: a retry is not applied twice.
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 2}), IsOkAndHolds(true));
  ASSERT_THAT(store_->Restore("after-fault"), IsOk());
  EXPECT_EQ(Pull(keys), acknowledged);
}

TEST_F(StoreFaultTest, PeriodicPushesAreRefusedPastTheUnwrittenBound) {
  max_unwritten_rows_ = 10;
  ASSERT_THAT(Open(Durability::kPeriodic), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  ASSERT_THAT(Push(Keys(1, 50), 1.0f), IsOk());
  faults_->FailWrites(0, /*no_space=*/true);
  ASSERT_THAT(store_->Flush(), Not(IsOk()));
  EXPECT_THAT(Push(Keys(1, 50), 1.0f),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("50 rows wait to be written")));
  EXPECT_FLOAT_EQ(Pull(Keys(1, 1))[0], -0.5f);
  faults_->Heal();
  ASSERT_TRUE(FlushSucceedsSoon());
  EXPECT_THAT(Push(Keys(1, 50), 1.0f), IsOkAndHolds(false));
}

class SerialStoreFaultTest : public StoreFaultTest,
                             public ::testing::WithParamInterface<Durability> {
};

TEST_P(SerialStoreFaultTest, FailedPushWriteIsAppliedNowhere) {
  ASSERT_THAT(Open(GetParam()), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = Keys(10, 20);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOkAndHolds(false));
  const std::vector<float> before = Pull(keys);
  const uint64_t sequence = store_->change_log().latest_sequence();

  faults_->FailWrites(0, /*no_space=*/false);
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 2}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_EQ(Pull(keys), before);
  EXPECT_EQ(store_->change_log().latest_sequence(), sequence);
  EXPECT_THAT(store_->GetStorageStats().write_error, HasSubstr("injected"));

  faults_->Heal();
  // The failed push was not recorded as applied: its retry applies it.
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 2}), IsOkAndHolds(false));
  const std::vector<float> after = Pull(keys);
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f);
  EXPECT_EQ(store_->change_log().latest_sequence(), sequence + 1);
  ASSERT_THAT(Open(GetParam()), IsOk());
  EXPECT_EQ(Pull(keys), after);
}

TEST_F(StoreFaultTest, FailedFsyncInSyncModeReachesNoFollowerAndNoRetry) {
  ASSERT_THAT(Open(Durability::kSync), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = Keys(10, 20);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOkAndHolds(false));
  const std::vector<float> before = Pull(keys);
  const uint64_t sequence = store_->change_log().latest_sequence();

  // The log's append works, its fsync fails: the push's durability is
  // unknown, so the caller gets an error and no follower may see it.
  faults_->FailSyncs(0);
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 2}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("fsync")));
  EXPECT_EQ(store_->change_log().latest_sequence(), sequence);
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  ASSERT_THAT(store_->change_log().ReadAfter(sequence, 10, &records), IsOk());
  EXPECT_TRUE(records.empty());
  // Nor a new follower's snapshot, nor later pushes.
  EXPECT_THAT(store_->OpenValueSnapshot({}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("fsync")));
  faults_->Heal();
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 3}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("fsync")));
  // Nor a synced table creation, whose fsync would publish the held push.
  EmbeddingTableConfig other = SgdTable();
  other.name = "other";
  EXPECT_THAT(store_->CreateTable(other),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("fsync")));
  EXPECT_EQ(store_->change_log().latest_sequence(), sequence);

  // After the restart the store holds what its log holds. Here the page
  // cache kept the append, so the push is there exactly once, with its push
  // window: the client's retry is acknowledged without applying it again.
  ASSERT_THAT(Open(Durability::kSync), IsOk());
  const std::vector<float> after = Pull(keys);
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f);
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 2}), IsOkAndHolds(true));
  EXPECT_EQ(Pull(keys), after);
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 3}), IsOkAndHolds(false));
}

TEST_P(SerialStoreFaultTest, FullDiskRefusesPushesKeepsPullsAndRecovers) {
  ASSERT_THAT(Open(GetParam()), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = Keys(1, 10);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOk());
  const std::vector<float> before = Pull(keys);

  faults_->FailWrites(0, /*no_space=*/true);
  EXPECT_THAT(
      Push(keys, 1.0f, {"trainer", 2}),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("is full")));
  // Reads go on while the disk is full.
  EXPECT_EQ(Pull(keys), before);
  // Later pushes are refused too (full, or recovering), never applied.
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 3}), Not(IsOk()));
  EXPECT_EQ(Pull(keys), before);

  faults_->Heal();
  // Recovers by itself once space is free: the retry goes through.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Push(keys, 1.0f, {"trainer", 2}).ok();
      },
      absl::Seconds(60), absl::Milliseconds(100)));
  EXPECT_FLOAT_EQ(Pull(keys)[0], before[0] - 0.5f);
  ASSERT_THAT(Open(GetParam()), IsOk());
  EXPECT_FLOAT_EQ(Pull(keys)[0], before[0] - 0.5f);
}

TEST_P(SerialStoreFaultTest, AShardStartsReadOnlyOnAFullDiskAndRecovers) {
  ASSERT_THAT(Open(GetParam()), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = Keys(1, 10);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOk());
  const std::vector<float> acknowledged = Pull(keys);
  store_.reset();

  faults_->FailWrites(0, /*no_space=*/true);
  ASSERT_THAT(Open(GetParam()), IsOk());
  EXPECT_EQ(Pull(keys), acknowledged);
  EXPECT_THAT(
      Push(keys, 1.0f, {"trainer", 2}),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("read-only")));
  EXPECT_THAT(store_->GetStorageStats().write_error, HasSubstr("is full"));
  EXPECT_EQ(Pull(keys), acknowledged);

  faults_->Heal();
  // A later write reopens it for writing once the disk has room.
  EXPECT_TRUE(WaitUntil(
      [&] {
        clock_.Advance(absl::Seconds(2));
        return Push(keys, 1.0f, {"trainer", 2}).ok();
      },
      absl::Seconds(30), absl::Milliseconds(100)));
  EXPECT_FLOAT_EQ(Pull(keys)[0], acknowledged[0] - 0.5f);
  ASSERT_THAT(Open(GetParam()), IsOk());
  EXPECT_FLOAT_EQ(Pull(keys)[0], acknowledged[0] - 0.5f);
}

TEST_P(SerialStoreFaultTest, RepeatedTableInOnePushAppliesBothBatches) {
  ASSERT_THAT(Open(GetParam()), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = {5, 6};
  std::vector<float> ones(keys.size() * kDim, 1.0f);
  GradientBatch batch{"ads", keys, ones};
  ASSERT_THAT(store_->ApplyGradients({batch, batch}, {}), IsOk());
  EXPECT_FLOAT_EQ(Pull(keys)[0], -1.0f);
  ASSERT_THAT(Open(GetParam()), IsOk());
  EXPECT_FLOAT_EQ(Pull(keys)[0], -1.0f);
}

INSTANTIATE_TEST_SUITE_P(SyncAndGroup, SerialStoreFaultTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup),
                         [](const ::testing::TestParamInfo<Durability>& info) {
                           return std::string(DurabilityName(info.param));
                         });

TEST_F(StoreFaultTest, GroupPushesWaitInThePushLogUntilAFlushWritesThem) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  const std::vector<FeatureId> keys = Keys(1, 10);
  ASSERT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOk());
  const std::vector<float> pushed = Pull(keys);
  EXPECT_GE(store_->GetStorageStats().push_log_bytes,
            keys.size() * (sizeof(FeatureId) + kDim * sizeof(float)));

  // A flush that fails keeps the log; one that works empties it.
  faults_->FailWrites(0, /*no_space=*/false);
  EXPECT_THAT(store_->Flush(), Not(IsOk()));
  EXPECT_GT(store_->GetStorageStats().push_log_bytes, 0u);
  EXPECT_GT(store_->GetStorageStats().unwritten_rows, 0u);
  faults_->Heal();
  ASSERT_TRUE(FlushSucceedsSoon());
  EXPECT_EQ(store_->GetStorageStats().push_log_bytes, 0u);
  EXPECT_EQ(store_->GetStorageStats().unwritten_rows, 0u);
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  EXPECT_EQ(Pull(keys), pushed);
  EXPECT_THAT(Push(keys, 1.0f, {"trainer", 1}), IsOkAndHolds(true));
}

TEST_F(StoreFaultTest, ClientIdOverTheLimitIsRefused) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  EXPECT_THAT(
      Push(Keys(1, 2), 1.0f, {std::string(kMaxClientIdBytes + 1, 'c'), 1}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client_id")));
  EXPECT_THAT(Push(Keys(1, 2), 1.0f, {std::string(kMaxClientIdBytes, 'c'), 1}),
              IsOkAndHolds(false));
}

TEST_F(StoreFaultTest, IdlePushWindowsAreForgottenOnDiskToo) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  ASSERT_THAT(Push(Keys(1, 1), 1.0f, {"idle", 1}), IsOkAndHolds(false));
  clock_.Advance(absl::Hours(2));
  for (const char* client : {"a", "b", "c"}) {
    ASSERT_THAT(Push(Keys(1, 1), 1.0f, {client, 1}), IsOkAndHolds(false));
    clock_.Advance(absl::Seconds(1));
  }
  // "idle" is past the hour; of a, b and c two may stay (max_push_windows).
  EXPECT_THAT(store_->ExpirePushWindows(), IsOkAndHolds(2u));
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  EXPECT_THAT(Push(Keys(1, 1), 1.0f, {"c", 1}), IsOkAndHolds(true));
  EXPECT_THAT(Push(Keys(1, 1), 1.0f, {"b", 1}), IsOkAndHolds(true));
  // Forgotten, on disk too: its old retry is applied again.
  EXPECT_THAT(Push(Keys(1, 1), 1.0f, {"idle", 1}), IsOkAndHolds(false));
}

TEST_F(StoreFaultTest, DamagedCheckpointsAreRefusedNamedAndKeepTheRows) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable()), IsOk());
  ASSERT_THAT(Push(Keys(1, 4), 1.0f), IsOk());
  ASSERT_THAT(store_->Checkpoint("garbled", 1), IsOk());
  ASSERT_THAT(store_->Checkpoint("broken", 2), IsOk());
  ASSERT_THAT(Push(Keys(1, 4), 1.0f), IsOk());
  const std::vector<float> live = Pull(Keys(1, 4));
  const std::string checkpoints = temp_dir_ + "/data/checkpoints/";
  {
    std::ofstream manifest(checkpoints + "garbled/STRATA_CHECKPOINT",
                           std::ios::trunc);
    manifest << "garbage";
  }
  EXPECT_THAT(
      store_->Restore("garbled"),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("checkpoint 'garbled' has a corrupt manifest")));
  {
    std::ofstream current(checkpoints + "broken/CURRENT", std::ios::trunc);
    current << "garbage";
  }
  absl::StatusOr<CheckpointInfo> restored = store_->Restore("broken");
  EXPECT_THAT(restored, StatusIs(absl::StatusCode::kDataLoss,
                                 HasSubstr("checkpoint 'broken' is corrupt")));
  EXPECT_THAT(restored.status().message(), Not(HasSubstr("store in")));
  EXPECT_EQ(Pull(Keys(1, 4)), live);
  EXPECT_THAT(Push(Keys(1, 4), 1.0f), IsOk());
}

TEST_F(StoreFaultTest, BudgetOverTheMachinesMemoryIsRejected) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  EmbeddingTableConfig config = SgdTable();
  config.memory_budget_bytes = uint64_t{1} << 62;
  EXPECT_THAT(store_->CreateTable(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory_budget_bytes")));
}

TEST_F(StoreFaultTest, BudgetNearTheMachinesMemoryCostsOnlyItsRows) {
  ASSERT_THAT(Open(Durability::kGroup), IsOk());
  EmbeddingTableConfig config = SgdTable();
  config.memory_budget_bytes = PhysicalMemoryBytes() / 2;
  ASSERT_THAT(store_->CreateTable(config), IsOk());
  ASSERT_THAT(Push(Keys(1, 1000), 1.0f), IsOk());
  ASSERT_THAT(Push(Keys(1, 1000), 1.0f), IsOk());
  EXPECT_FLOAT_EQ(Pull(Keys(1, 1))[0], -1.0f);
  const std::vector<TableStats> tables = store_->ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_LT(tables[0].memory_bytes, uint64_t{16} << 20);
  EXPECT_THAT(store_->Checkpoint("budgeted", 1), IsOk());
}

}  // namespace
}  // namespace strata
