// What bucket moves ask of the store (ExportRows, ReadRows, WriteRows,
// DropRows): rows leave one store and arrive in another with their
// optimizer state, in every durability mode and with a memory budget; none
// of it reaches the change stream; a failed write changes nothing.

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "embedding/table_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

constexpr uint32_t kDim = 3;
constexpr char kTable[] = "items";

EmbeddingTableConfig AdagradTable(uint64_t memory_budget_bytes = 0) {
  EmbeddingTableConfig config;
  config.name = kTable;
  config.dim = kDim;
  config.seed = 11;
  config.initializer.type = InitializerType::kUniform;
  config.optimizer.type = OptimizerType::kAdagrad;
  config.optimizer.learning_rate = 0.3f;
  config.memory_budget_bytes = memory_budget_bytes;
  return config;
}

// The rows of even buckets.
bool EvenBucket(FeatureId key) {
  return BucketOf(HashString(kTable), key) % 2 == 0;
}

struct TransferCase {
  Durability durability;
  uint64_t memory_budget_bytes;
};

class RowTransferTest : public ::testing::TestWithParam<TransferCase> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    std::string pattern = ::testing::TempDir() + "strata_transfer_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    dir_ = pattern;
    env_ = faults_->NewEnv();
  }
  void TearDown() override {
    faults_->Heal();
    source_.reset();
    target_.reset();
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  std::unique_ptr<EmbeddingStore> Open(const std::string& name) {
    EmbeddingStoreOptions options;
    options.data_dir = dir_ + "/" + name;
    options.durability = GetParam().durability;
    options.rocksdb_env = env_.get();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    EXPECT_THAT(
        (*store)->CreateTable(AdagradTable(GetParam().memory_budget_bytes)),
        IsOk());
    return std::move(*store);
  }

  static void Push(EmbeddingStore& store, const std::vector<FeatureId>& keys,
                   float scale) {
    std::vector<float> gradients(keys.size() * kDim);
    for (size_t i = 0; i < gradients.size(); ++i) {
      gradients[i] = scale * static_cast<float>(i % 7 + 1) / 7.0f;
    }
    ASSERT_THAT(store.ApplyGradients({{kTable, keys, gradients}}, {}), IsOk());
  }

  static std::vector<float> Pull(EmbeddingStore& store,
                                 const std::vector<FeatureId>& keys) {
    std::vector<float> values(keys.size() * kDim);
    EXPECT_THAT(store.Lookup(kTable, keys, absl::MakeSpan(values)), IsOk());
    return values;
  }

  // Every row of the even buckets, exported a few rows at a time.
  static std::vector<RowBlock> ExportAll(EmbeddingStore& store) {
    std::vector<RowBlock> blocks;
    ExportCursor cursor;
    while (!cursor.done) {
      absl::StatusOr<RowBlock> block =
          store.ExportRows(kTable, EvenBucket, cursor, 500);
      EXPECT_THAT(block, IsOk());
      if (!block.ok()) break;
      blocks.push_back(*std::move(block));
      if (!blocks.back().keys.empty()) {
        EXPECT_LE(blocks.back().keys.size(), 500u);
      }
    }
    return blocks;
  }

  std::shared_ptr<FaultInjectionFileSystem> faults_ =
      std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env_;
  std::string dir_;
  std::unique_ptr<EmbeddingStore> source_;
  std::unique_ptr<EmbeddingStore> target_;
};

std::vector<FeatureId> Keys(size_t n) {
  std::vector<FeatureId> keys;
  for (FeatureId key = 1; key <= n; ++key) keys.push_back(key);
  return keys;
}

TEST_P(RowTransferTest, MovedRowsKeepTheirOptimizerStateAndSkipTheStream) {
  source_ = Open("source");
  target_ = Open("target");
  ASSERT_NE(source_, nullptr);
  ASSERT_NE(target_, nullptr);
  // With a budget, about a third of the rows stay on disk only.
  const std::vector<FeatureId> keys =
      Keys(GetParam().memory_budget_bytes > 0 ? 24000 : 600);
  Push(*source_, keys, 1.0f);
  Push(*source_, keys, -0.5f);
  if (GetParam().memory_budget_bytes > 0) {
    // Written (kPeriodic), rows past the budget leave memory.
    ASSERT_THAT(source_->Flush(), IsOk());
    ASSERT_LT(source_->ListTables()[0].rows_in_memory, keys.size() * 3 / 4);
  }
  const uint64_t target_sequence = target_->change_log().latest_sequence();

  uint64_t moved = 0;
  for (const RowBlock& block : ExportAll(*source_)) {
    moved += block.keys.size();
    for (FeatureId key : block.keys) ASSERT_TRUE(EvenBucket(key)) << key;
    ASSERT_THAT(target_->WriteRows(block), IsOk());
  }
  std::vector<FeatureId> even;
  for (FeatureId key : keys) {
    if (EvenBucket(key)) even.push_back(key);
  }
  // Every row once at least (a budgeted table's rows may come twice).
  ASSERT_GE(moved, even.size());
  EXPECT_EQ(Pull(*target_, even), Pull(*source_, even));
  // The same push on both: equal only if the Adagrad accumulators moved.
  Push(*source_, even, 2.0f);
  Push(*target_, even, 2.0f);
  EXPECT_EQ(Pull(*target_, even), Pull(*source_, even));
  EXPECT_EQ(target_->change_log().latest_sequence(), target_sequence + 1);

  // The source drops its copy: back to initial values, off the stream.
  const uint64_t source_sequence = source_->change_log().latest_sequence();
  EXPECT_THAT(source_->DropRows(kTable, EvenBucket), IsOkAndHolds(even.size()));
  EXPECT_EQ(source_->change_log().latest_sequence(), source_sequence);
  EXPECT_EQ(source_->ListTables()[0].num_rows, keys.size() - even.size());
  std::unique_ptr<EmbeddingStore> fresh = Open("fresh");
  EXPECT_EQ(Pull(*source_, even), Pull(*fresh, even));
  EXPECT_TRUE(ExportAll(*source_).front().keys.empty());
  // Both survive a reopen.
  const std::vector<float> moved_rows = Pull(*target_, even);
  target_.reset();
  target_ = Open("target");
  EXPECT_EQ(Pull(*target_, even), moved_rows);
}

TEST_P(RowTransferTest, ReadRowsNamesDeletedRowsAndWriteRowsDeletesThem) {
  source_ = Open("source");
  target_ = Open("target");
  const std::vector<FeatureId> keys = Keys(20);
  Push(*source_, keys, 1.0f);
  ASSERT_THAT(target_->WriteRows(*source_->ReadRows(kTable, keys)), IsOk());
  std::unique_ptr<EmbeddingStore> fresh = Open("fresh");
  // Rows 1..10 leave the source; a read names them absent, and the target
  // deletes its copy when it gets that answer.
  ASSERT_THAT(
      source_->DropRows(kTable, [](FeatureId key) { return key <= 10; }),
      IsOkAndHolds(10u));
  absl::StatusOr<RowBlock> again = source_->ReadRows(kTable, keys);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->keys.size(), 10u);
  EXPECT_EQ(again->absent.size(), 10u);
  ASSERT_THAT(target_->WriteRows(*again), IsOk());
  EXPECT_EQ(Pull(*target_, keys), Pull(*source_, keys));
  EXPECT_EQ(target_->ListTables()[0].num_rows, 10u);
  EXPECT_EQ(Pull(*target_, {1, 2}), Pull(*fresh, {1, 2}));
}

TEST_P(RowTransferTest, AFailedWriteChangesNothingAndBadSizesAreRefused) {
  source_ = Open("source");
  target_ = Open("target");
  const std::vector<FeatureId> keys = Keys(30);
  Push(*source_, keys, 1.0f);
  absl::StatusOr<RowBlock> rows = source_->ReadRows(kTable, keys);
  ASSERT_THAT(rows, IsOk());
  const std::vector<float> before = Pull(*target_, keys);

  faults_->FailWrites(/*after=*/0, /*no_space=*/true);
  EXPECT_THAT(target_->WriteRows(*rows),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(Pull(*target_, keys), before);
  EXPECT_EQ(target_->ListTables()[0].num_rows, 0u);
  faults_->Heal();

  RowBlock short_values = *rows;
  short_values.values.pop_back();
  EXPECT_THAT(target_->WriteRows(short_values),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer state dim")));
  RowBlock not_finite = *rows;
  not_finite.values[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(
      target_->WriteRows(not_finite),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not finite")));
  RowBlock unknown = *rows;
  unknown.table = "nope";
  EXPECT_THAT(target_->WriteRows(unknown),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  EXPECT_EQ(Pull(*target_, keys), before);
  // Healed, the same rows go in (once the store resumed writing).
  ASSERT_TRUE(WaitUntil([&] { return target_->WriteRows(*rows).ok(); },
                        absl::Seconds(60), absl::Milliseconds(50)));
  EXPECT_EQ(Pull(*target_, keys), Pull(*source_, keys));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, RowTransferTest,
    ::testing::Values(TransferCase{Durability::kSync, 0},
                      TransferCase{Durability::kGroup, 0},
                      TransferCase{Durability::kPeriodic, 0},
                      TransferCase{Durability::kGroup, kMinMemoryBudgetBytes},
                      TransferCase{Durability::kPeriodic,
                                   kMinMemoryBudgetBytes}),
    [](const ::testing::TestParamInfo<TransferCase>& info) {
      return absl::StrCat(DurabilityName(info.param.durability),
                          info.param.memory_budget_bytes > 0 ? "Budget" : "");
    });

}  // namespace
}  // namespace strata
