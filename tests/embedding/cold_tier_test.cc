// Tables with a memory budget: rows past it live on disk only, and pulls,
// pushes, restarts, snapshots and checkpoints still see every row.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/time/time.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;

constexpr uint32_t kDim = 8;
constexpr FeatureId kRows = 20000;

// SGD with learning rate 1 from zeros: a row is minus the sum of its
// gradients, which the test tracks exactly.
EmbeddingTableConfig BudgetedTable() {
  EmbeddingTableConfig config;
  config.name = "cold";
  config.dim = kDim;
  config.initializer.type = InitializerType::kZeros;
  config.optimizer.type = OptimizerType::kSgd;
  config.optimizer.learning_rate = 1.0f;
  config.memory_budget_bytes = kMinMemoryBudgetBytes;  // about 13k rows
  return config;
}

class ColdTierTest : public ::testing::TestWithParam<Durability> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    std::string pattern = ::testing::TempDir() + "strata_cold_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    temp_dir_ = pattern;
    ASSERT_THAT(Open(), IsOk());
  }
  void TearDown() override {
    store_.reset();
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
  }

  absl::Status Open(uint64_t shard_budget = 0) {
    store_.reset();
    EmbeddingStoreOptions options;
    options.memory_budget_bytes = shard_budget;
    options.data_dir = temp_dir_ + "/data";
    options.durability = GetParam();
    options.flush_interval = absl::Hours(1);
    options.eviction_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    if (!store.ok()) return store.status();
    store_ = std::move(store).value();
    return absl::OkStatus();
  }

  // Pushes gradient `g` (the same in every dimension) to keys [begin, end).
  void Push(FeatureId begin, FeatureId end, float g,
            const std::string& table = "cold") {
    std::vector<FeatureId> keys;
    for (FeatureId key = begin; key < end; ++key) keys.push_back(key);
    // In batches, as workers push.
    for (size_t i = 0; i < keys.size(); i += 1000) {
      const size_t n = std::min<size_t>(1000, keys.size() - i);
      const std::vector<float> gradients(n * kDim, g);
      const GradientBatch batch{table, absl::MakeConstSpan(keys).subspan(i, n),
                                gradients};
      ASSERT_THAT(store_->ApplyGradients({batch}, PushId()), IsOk());
    }
    std::map<FeatureId, float>& expected =
        table == "cold" ? expected_ : others_[table];
    for (FeatureId key = begin; key < end; ++key) expected[key] -= g;
    if (GetParam() != Durability::kSync) {
      // What a periodic flush does (in group mode too, where pushes go to
      // the push log first): rows written can leave memory.
      ASSERT_THAT(store_->Flush(), IsOk());
    }
  }

  // Every key in [0, kRows + 100): pushed ones hold their sums, others 0.
  void ExpectAllRows(const std::string& table = "cold") {
    std::map<FeatureId, float>& expected =
        table == "cold" ? expected_ : others_[table];
    std::vector<FeatureId> keys;
    for (FeatureId key = 0; key < kRows + 100; ++key) keys.push_back(key);
    std::vector<float> rows(keys.size() * kDim);
    ASSERT_THAT(store_->Lookup(table, keys, absl::MakeSpan(rows)), IsOk());
    for (FeatureId key : keys) {
      const float want = expected.count(key) ? expected[key] : 0.0f;
      for (uint32_t d = 0; d < kDim; ++d) {
        ASSERT_EQ(rows[key * kDim + d], want) << "key " << key << " dim " << d;
      }
    }
  }

  TableStats Stats() { return store_->ListTables().at(0); }

  std::string temp_dir_;
  std::unique_ptr<EmbeddingStore> store_;
  std::map<FeatureId, float> expected_;
  std::map<std::string, std::map<FeatureId, float>> others_;
};

TEST_P(ColdTierTest, RowsPastTheBudgetLiveOnDiskAndReadBackExactly) {
  ASSERT_THAT(store_->CreateTable(BudgetedTable()), IsOkAndHolds(true));
  Push(0, kRows, 1.0f);
  TableStats stats = Stats();
  EXPECT_EQ(stats.num_rows, kRows);
  EXPECT_LT(stats.rows_in_memory, kRows * 3 / 4);
  EXPECT_GT(stats.rows_in_memory, kRows / 4);
  EXPECT_LE(stats.memory_bytes, BudgetedTable().memory_budget_bytes);
  ExpectAllRows();

  // Pushes to cold rows start from their stored values; hot and cold mixed.
  Push(0, 500, 0.5f);
  Push(kRows - 500, kRows + 50, 2.0f);  // 50 new rows
  ExpectAllRows();
  EXPECT_EQ(Stats().num_rows, kRows + 50);
  EXPECT_LE(Stats().memory_bytes, BudgetedTable().memory_budget_bytes);

  // A restart loads what fits and leaves the rest on disk.
  ASSERT_THAT(Open(), IsOk());
  stats = Stats();
  EXPECT_EQ(stats.num_rows, kRows + 50);
  EXPECT_LT(stats.rows_in_memory, kRows * 3 / 4);
  ExpectAllRows();
  Push(100, 200, 1.0f);
  ExpectAllRows();
}

TEST_P(ColdTierTest, SnapshotAndCheckpointCarryTheRowsOnDisk) {
  ASSERT_THAT(store_->CreateTable(BudgetedTable()), IsOk());
  Push(0, kRows, 1.0f);
  Push(0, 100, 3.0f);
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> snapshot =
      store_->OpenValueSnapshot({});
  ASSERT_THAT(snapshot.status(), IsOk());
  std::map<FeatureId, float> seen;
  ChangedRows chunk;
  while (true) {
    absl::StatusOr<bool> more = (*snapshot)->Next(chunk);
    ASSERT_THAT(more.status(), IsOk());
    if (!*more) break;
    for (size_t i = 0; i < chunk.keys.size(); ++i) {
      ASSERT_EQ(seen.count(chunk.keys[i]), 0u) << "twice: " << chunk.keys[i];
      seen[chunk.keys[i]] = chunk.values[i * kDim];
    }
  }
  EXPECT_EQ(seen, expected_);

  ASSERT_THAT(store_->Checkpoint("c", 1), IsOk());
  const std::map<FeatureId, float> at_checkpoint = expected_;
  Push(0, kRows, 1.0f);
  ASSERT_THAT(store_->Restore("c"), IsOk());
  expected_ = at_checkpoint;
  ExpectAllRows();
  EXPECT_EQ(Stats().num_rows, kRows);
}

TEST_P(ColdTierTest, ABudgetedTableJoinsAStoreOfOtherTables) {
  // The store starts with vector memtables (no budget anywhere) and turns to
  // skip lists when the budgeted table arrives; the other table's rows stay.
  EmbeddingTableConfig plain = BudgetedTable();
  plain.name = "plain";
  plain.memory_budget_bytes = 0;
  ASSERT_THAT(store_->CreateTable(plain), IsOk());
  const std::vector<FeatureId> keys = {1, 2, 3};
  const std::vector<float> gradients(keys.size() * kDim, -4.0f);
  ASSERT_THAT(store_->ApplyGradients({GradientBatch{"plain", keys, gradients}},
                                     PushId()),
              IsOk());
  ASSERT_THAT(store_->CreateTable(BudgetedTable()), IsOk());
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(store_->Lookup("plain", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(rows, std::vector<float>(keys.size() * kDim, 4.0f));
  Push(0, kRows, 1.0f);
  ExpectAllRows();
}

// Two batches of one table in one push: the rows the first updates stay in
// memory until the push's write is in, so the second never reads them back
// from disk stale, even while it brings new rows into full stripes.
TEST_P(ColdTierTest, TwoBatchesOfATableInOnePushBothApply) {
  ASSERT_THAT(store_->CreateTable(BudgetedTable()), IsOk());
  Push(0, kRows, 1.0f);
  std::vector<FeatureId> first, second;
  for (FeatureId key = 0; key < 3000; ++key) first.push_back(key);
  // New keys first: they make room before the second batch reaches (and
  // pins) the first batch's keys.
  for (FeatureId key = kRows; key < kRows + 3000; ++key) second.push_back(key);
  second.insert(second.end(), first.begin(), first.end());
  const std::vector<float> g1(first.size() * kDim, 0.5f);
  const std::vector<float> g2(second.size() * kDim, 0.25f);
  ASSERT_THAT(store_->ApplyGradients({GradientBatch{"cold", first, g1},
                                      GradientBatch{"cold", second, g2}},
                                     PushId()),
              IsOk());
  for (FeatureId key : first) expected_[key] -= 0.5f;
  for (FeatureId key : second) expected_[key] -= 0.25f;
  if (GetParam() != Durability::kSync) {
    ASSERT_THAT(store_->Flush(), IsOk());
  }
  ExpectAllRows();
}

TEST_P(ColdTierTest, TablesWithoutABudgetShareTheShards) {
  ASSERT_THAT(Open(/*shard_budget=*/3 * kMinMemoryBudgetBytes), IsOk());
  EmbeddingTableConfig config = BudgetedTable();
  config.memory_budget_bytes = 0;
  for (const char* name : {"a", "b"}) {
    config.name = name;
    ASSERT_THAT(store_->CreateTable(config), IsOk());
    Push(0, kRows, 1.0f, name);
  }
  for (const TableStats& stats : store_->ListTables()) {
    EXPECT_LE(stats.memory_bytes, 3 * kMinMemoryBudgetBytes / 2);
    EXPECT_GT(stats.memory_bytes, kMinMemoryBudgetBytes);
    EXPECT_EQ(stats.num_rows, kRows);
  }
  // A third table: every share shrinks to a third, at once.
  config.name = "c";
  ASSERT_THAT(store_->CreateTable(config), IsOk());
  Push(0, kRows, 1.0f, "c");
  for (const TableStats& stats : store_->ListTables()) {
    EXPECT_LE(stats.memory_bytes, kMinMemoryBudgetBytes) << stats.config.name;
    EXPECT_LT(stats.rows_in_memory, kRows);
  }
  for (const char* name : {"a", "b", "c"}) ExpectAllRows(name);
  // The shares hold across a restart.
  ASSERT_THAT(Open(3 * kMinMemoryBudgetBytes), IsOk());
  for (const TableStats& stats : store_->ListTables()) {
    EXPECT_LE(stats.memory_bytes, kMinMemoryBudgetBytes) << stats.config.name;
  }
  for (const char* name : {"a", "b", "c"}) ExpectAllRows(name);
}

TEST(ColdTierConfigTest, TooSmallABudgetIsRefusedNamingTheField) {
  EmbeddingTableConfig config = BudgetedTable();
  config.memory_budget_bytes = 1000;
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("memory_budget_bytes 1000")));
}

INSTANTIATE_TEST_SUITE_P(Modes, ColdTierTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup,
                                           Durability::kPeriodic),
                         [](const auto& info) {
                           return std::string(DurabilityName(info.param));
                         });

}  // namespace
}  // namespace strata
