// Feature admission and eviction of EmbeddingStore tables, on a real RocksDB
// in a temporary directory, with a fake clock and scripted global steps.

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/time/time.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "embedding/initializer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::FakeClock;
using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

constexpr uint32_t kDim = 2;

// SGD with learning rate 1 from constant rows of 1: a row's value is 1
// minus the sum of the gradients applied to it.
EmbeddingTableConfig SgdTable(const std::string& name) {
  EmbeddingTableConfig config;
  config.name = name;
  config.dim = kDim;
  config.seed = 7;
  config.initializer.type = InitializerType::kConstant;
  config.initializer.value = 1.0f;
  config.optimizer.type = OptimizerType::kSgd;
  config.optimizer.learning_rate = 1.0f;
  return config;
}

class AdmissionEvictionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    std::string pattern = ::testing::TempDir() + "strata_policy_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    temp_dir_ = pattern;
  }

  void TearDown() override {
    store_.reset();
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
    EXPECT_FALSE(error) << error.message();
  }

  absl::Status Open(Durability durability = Durability::kGroup,
                    const std::string& dir = "data",
                    absl::Duration eviction_interval = absl::ZeroDuration()) {
    store_.reset();
    EmbeddingStoreOptions options;
    options.data_dir = temp_dir_ + "/" + dir;
    options.durability = durability;
    options.flush_interval = absl::Hours(1);
    options.clock = &clock_;
    options.eviction_interval = eviction_interval;  // Zero: EvictNow() only.
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    // The tests read the change log as a follower's stream does; without a
    // reader, periodic pushes leave their rows out of it.
    store_->change_log().NoteReader();
    return absl::OkStatus();
  }

  // Pushes a gradient of `g` in every component for each key.
  absl::Status Push(const std::string& table,
                    const std::vector<FeatureId>& keys, float g = 0.25f,
                    uint64_t global_step = 0) {
    std::vector<float> gradients(keys.size() * kDim, g);
    GradientBatch batch{table, keys, gradients, global_step};
    return store_->ApplyGradients({batch}, PushId{}).status();
  }

  std::vector<float> Lookup(const std::string& table,
                            const std::vector<FeatureId>& keys) {
    std::vector<float> out(keys.size() * kDim);
    EXPECT_THAT(store_->Lookup(table, keys, absl::MakeSpan(out)), IsOk());
    return out;
  }

  TableStats Stats(const std::string& table) {
    for (const TableStats& stats : store_->ListTables()) {
      if (stats.config.name == table) return stats;
    }
    ADD_FAILURE() << "no table " << table;
    return {};
  }

  // The keys deleted by each change record since `after`, for `table`.
  std::vector<std::vector<FeatureId>> DeletedKeys(const std::string& table,
                                                  uint64_t after) {
    std::vector<std::shared_ptr<const ChangeRecord>> records;
    EXPECT_THAT(store_->change_log().ReadAfter(after, 1000, &records), IsOk());
    std::vector<std::vector<FeatureId>> out;
    for (const auto& record : records) {
      for (const DeletedRows& rows : record->deleted) {
        if (rows.table != table) continue;
        out.push_back(rows.keys);
        std::sort(out.back().begin(), out.back().end());
      }
    }
    return out;
  }

  // The keys each change record since `after` carries for `table`.
  std::vector<std::vector<FeatureId>> LoggedKeys(const std::string& table,
                                                 uint64_t after) {
    std::vector<std::shared_ptr<const ChangeRecord>> records;
    EXPECT_THAT(store_->change_log().ReadAfter(after, 1000, &records), IsOk());
    std::vector<std::vector<FeatureId>> out;
    for (const auto& record : records) {
      for (const ChangedRows& rows : record->rows) {
        if (rows.table == table) out.push_back(rows.keys);
      }
    }
    return out;
  }

  FakeClock clock_;
  std::string temp_dir_;
  std::unique_ptr<EmbeddingStore> store_;
};

TEST_F(AdmissionEvictionTest, MinCountAdmitsAtTheNthSightingAndDropsBefore) {
  for (Durability durability : {Durability::kGroup, Durability::kPeriodic}) {
    SCOPED_TRACE(DurabilityName(durability));
    ASSERT_THAT(Open(durability, std::string(DurabilityName(durability))),
                IsOk());
    EmbeddingTableConfig config = SgdTable("t");
    config.admission.min_count = 3;
    config.admission.sketch_width = 1024;
    config.admission.sketch_depth = 4;
    ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
    const uint64_t start = store_->change_log().latest_sequence();
    // Sightings: key 1 three times by the third push, then once more; keys
    // 2, 3 and 4 fewer than three times.
    ASSERT_THAT(Push("t", {1, 2, 3}), IsOk());
    ASSERT_THAT(Push("t", {1, 2}), IsOk());
    ASSERT_THAT(Push("t", {1}), IsOk());
    ASSERT_THAT(Push("t", {1, 4}), IsOk());
    const TableStats stats = Stats("t");
    EXPECT_EQ(stats.admitted_keys, 1u);
    EXPECT_EQ(stats.rejected_gradients, 6u);  // 3 + 2 + 0 + 1
    EXPECT_EQ(stats.num_rows, 1u);
    // Key 1 got the gradients of its third and fourth pushes only; the
    // others read as never written: the initializer's value.
    EXPECT_THAT(Lookup("t", {1, 2, 3, 4}),
                ElementsAre(0.5f, 0.5f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f));
    // The change stream carries admitted rows only.
    EXPECT_THAT(
        LoggedKeys("t", start),
        ElementsAre(IsEmpty(), IsEmpty(), ElementsAre(1u), ElementsAre(1u)));
  }
}

TEST_F(AdmissionEvictionTest, KeysWithARowStayAdmittedAfterARestart) {
  ASSERT_THAT(Open(), IsOk());
  EmbeddingTableConfig config = SgdTable("t");
  config.admission.min_count = 2;
  ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {5}), IsOk());
  ASSERT_THAT(Push("t", {5}), IsOk());
  EXPECT_EQ(Stats("t").admitted_keys, 1u);
  ASSERT_THAT(Open(), IsOk());  // The sketch starts empty again.
  ASSERT_THAT(Push("t", {5, 6}), IsOk());
  const TableStats stats = Stats("t");
  EXPECT_EQ(stats.admitted_keys, 0u);  // 5 had its row already.
  EXPECT_EQ(stats.rejected_gradients, 1u);
  EXPECT_EQ(stats.num_rows, 1u);
  EXPECT_THAT(Lookup("t", {5, 6}), ElementsAre(0.5f, 0.5f, 1.0f, 1.0f));
  EXPECT_EQ(SerializeTableConfig(*store_->GetTableConfig("t")),
            SerializeTableConfig(config));
}

TEST_F(AdmissionEvictionTest, ProbabilityAdmitsTheSameKeysOnEveryRun) {
  std::vector<std::vector<float>> runs;
  std::vector<FeatureId> keys;
  for (FeatureId key = 0; key < 1000; ++key) keys.push_back(key);
  for (const std::string dir : {"a", "b"}) {
    ASSERT_THAT(Open(Durability::kGroup, dir), IsOk());
    EmbeddingTableConfig config = SgdTable("t");
    config.admission.probability = 0.25f;
    ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
    ASSERT_THAT(Push("t", keys), IsOk());
    const TableStats stats = Stats("t");
    EXPECT_EQ(stats.admitted_keys + stats.rejected_gradients, 1000u);
    EXPECT_EQ(stats.num_rows, stats.admitted_keys);
    // About a quarter, give or take five standard deviations (13.7).
    EXPECT_GT(stats.admitted_keys, 250u - 69u);
    EXPECT_LT(stats.admitted_keys, 250u + 69u);
    runs.push_back(Lookup("t", keys));
  }
  EXPECT_THAT(runs[0], ElementsAreArray(runs[1]));
  // A refused key gets a new draw at each sighting: pushing the keys again
  // admits about a quarter of the rest.
  const uint64_t before = Stats("t").admitted_keys;
  ASSERT_THAT(Push("t", keys), IsOk());
  const uint64_t again = Stats("t").admitted_keys - before;
  EXPECT_GT(again, 187u - 60u);
  EXPECT_LT(again, 187u + 60u);
}

TEST_F(AdmissionEvictionTest, WithoutAdmissionEveryNewKeyIsAdmitted) {
  ASSERT_THAT(Open(), IsOk());
  ASSERT_THAT(store_->CreateTable(SgdTable("t")), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {1, 2, 2}), IsOk());
  const TableStats stats = Stats("t");
  EXPECT_EQ(stats.admitted_keys, 2u);
  EXPECT_EQ(stats.rejected_gradients, 0u);
  EXPECT_THAT(Lookup("t", {1, 2}), ElementsAre(0.75f, 0.75f, 0.5f, 0.5f));
}

TEST_F(AdmissionEvictionTest, EvictAfterSecondsDeletesFromMemoryDiskAndLog) {
  for (Durability durability : {Durability::kGroup, Durability::kPeriodic}) {
    SCOPED_TRACE(DurabilityName(durability));
    const std::string dir(DurabilityName(durability));
    ASSERT_THAT(Open(durability, dir), IsOk());
    EmbeddingTableConfig config = SgdTable("t");
    config.eviction.after_seconds = 10;
    ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
    ASSERT_THAT(store_->CreateTable(SgdTable("kept")), IsOkAndHolds(true));
    ASSERT_THAT(Push("t", {1, 2, 3}), IsOk());
    ASSERT_THAT(Push("kept", {1}), IsOk());
    ASSERT_THAT(store_->Flush(), IsOk());
    clock_.Advance(absl::Seconds(5));
    ASSERT_THAT(Push("t", {2}), IsOk());  // Unflushed in kPeriodic.
    EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(0u));
    clock_.Advance(absl::Seconds(5));  // 1 and 3 idle for 10 s, 2 for 5 s.
    const uint64_t before = store_->change_log().latest_sequence();
    EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(2u));
    EXPECT_THAT(
        DeletedKeys("t", before),
        ::testing::UnorderedElementsAre(ElementsAre(1u), ElementsAre(3u)));
    TableStats stats = Stats("t");
    EXPECT_EQ(stats.evicted_rows, 2u);
    EXPECT_EQ(stats.num_rows, 1u);
    EXPECT_EQ(Stats("kept").num_rows, 1u);  // A table without eviction.
    EXPECT_THAT(Lookup("t", {1, 2, 3}),
                ElementsAre(1.0f, 1.0f, 0.5f, 0.5f, 1.0f, 1.0f));
    // After a restart only key 2 is on disk, and counts as updated at load.
    ASSERT_THAT(Open(durability, dir), IsOk());
    EXPECT_EQ(Stats("t").num_rows, 1u);
    EXPECT_THAT(Lookup("t", {1, 2, 3}),
                ElementsAre(1.0f, 1.0f, 0.5f, 0.5f, 1.0f, 1.0f));
    clock_.Advance(absl::Seconds(9));
    EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(0u));
    clock_.Advance(absl::Seconds(1));
    EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(1u));
    EXPECT_EQ(Stats("t").num_rows, 0u);
    ASSERT_THAT(Open(durability, dir), IsOk());
    EXPECT_EQ(Stats("t").num_rows, 0u);
    EXPECT_EQ(Stats("kept").num_rows, 1u);
  }
}

TEST_F(AdmissionEvictionTest, EvictAfterStepsCountsFromEachRowsLastStep) {
  ASSERT_THAT(Open(), IsOk());
  EmbeddingTableConfig config = SgdTable("t");
  config.eviction.after_steps = 10;
  ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {1}, 0.25f, /*global_step=*/1), IsOk());
  ASSERT_THAT(Push("t", {2}, 0.25f, 5), IsOk());
  ASSERT_THAT(Push("t", {3}, 0.25f, 0), IsOk());  // No step: as step 1.
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(0u));
  ASSERT_THAT(Push("t", {4}, 0.25f, 11), IsOk());
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(2u));  // 1 and 3.
  ASSERT_THAT(Push("t", {2}, 0.25f, 12), IsOk());
  ASSERT_THAT(Push("t", {5}, 0.25f, 21), IsOk());
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(1u));  // 4 (21 - 11).
  EXPECT_EQ(Stats("t").evicted_rows, 3u);
  EXPECT_EQ(Stats("t").num_rows, 2u);
  EXPECT_THAT(Lookup("t", {1, 2, 3, 4, 5}),
              ElementsAre(1.0f, 1.0f, 0.5f, 0.5f, 1.0f, 1.0f, 1.0f, 1.0f, 0.75f,
                          0.75f));
  // After a restart, loaded rows count from the first step pushed.
  ASSERT_THAT(Open(), IsOk());
  ASSERT_THAT(Push("t", {9}, 0.25f, 100), IsOk());
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(0u));
  ASSERT_THAT(Push("t", {9}, 0.25f, 109), IsOk());
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(0u));
  ASSERT_THAT(Push("t", {9}, 0.25f, 110), IsOk());
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(2u));  // 2 and 5.
  EXPECT_EQ(Stats("t").num_rows, 1u);
}

TEST_F(AdmissionEvictionTest, EvictMinNormDeletesSmallRows) {
  ASSERT_THAT(Open(), IsOk());
  EmbeddingTableConfig config = SgdTable("t");
  config.eviction.min_norm = 0.6f;
  ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {1}, 0.25f), IsOk());  // (0.75, 0.75): 1.06
  ASSERT_THAT(Push("t", {2}, 0.7f), IsOk());   // (0.3, 0.3): 0.42
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(1u));
  EXPECT_EQ(Stats("t").num_rows, 1u);
  EXPECT_THAT(Lookup("t", {1, 2}), ElementsAre(0.75f, 0.75f, 1.0f, 1.0f));
}

TEST_F(AdmissionEvictionTest, CheckpointAfterEvictionHoldsOnlyKeptRows) {
  ASSERT_THAT(Open(Durability::kPeriodic), IsOk());
  EmbeddingTableConfig config = SgdTable("t");
  config.eviction.after_seconds = 60;
  ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {1, 2, 3, 4}), IsOk());
  clock_.Advance(absl::Seconds(30));
  ASSERT_THAT(Push("t", {4}), IsOk());
  ASSERT_THAT(store_->Checkpoint("before", 1), IsOk());
  clock_.Advance(absl::Seconds(30));
  EXPECT_THAT(store_->EvictNow(), IsOkAndHolds(3u));
  absl::StatusOr<CheckpointInfo> after = store_->Checkpoint("after", 2);
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->num_rows, 1u);
  ASSERT_THAT(store_->Restore("before"), IsOk());
  EXPECT_EQ(Stats("t").num_rows, 4u);
  ASSERT_THAT(store_->Restore("after"), IsOk());
  EXPECT_EQ(Stats("t").num_rows, 1u);
  EXPECT_THAT(Lookup("t", {1, 2, 3, 4}),
              ElementsAre(1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.5f, 0.5f));
}

TEST_F(AdmissionEvictionTest, BackgroundSweepEvictsWithoutBeingAsked) {
  ASSERT_THAT(Open(Durability::kGroup, "data", absl::Milliseconds(5)), IsOk());
  EmbeddingTableConfig config = SgdTable("t");
  config.eviction.after_seconds = 1;
  ASSERT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  ASSERT_THAT(Push("t", {1, 2}), IsOk());
  clock_.Advance(absl::Seconds(1));
  const absl::Time deadline = Clock::Real()->Now() + absl::Seconds(10);
  while (Stats("t").evicted_rows < 2 && Clock::Real()->Now() < deadline) {
    Clock::Real()->SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Stats("t").evicted_rows, 2u);
  EXPECT_EQ(Stats("t").num_rows, 0u);
}

}  // namespace
}  // namespace strata
