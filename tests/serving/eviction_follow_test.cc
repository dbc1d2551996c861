// Eviction and admission end to end: a real strata-server evicts rows by
// global steps in its background sweep, strata-serving following it forgets
// them, checkpoints taken afterwards lack them, and the counters show in
// ListTables and /metrics.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::MetricsPort;
using ::strata::testing::SampleValue;
using ::strata::testing::ServingTestCluster;
using ::strata::testing::SgdTable;
using ::testing::Each;
using ::testing::ElementsAreArray;
using ::testing::Ne;

constexpr uint32_t kDim = 4;

std::vector<uint64_t> Keys(uint64_t first, uint64_t count) {
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < first + count; ++k) keys.push_back(k);
  return keys;
}

class EvictionFollowTest : public ::testing::Test {
 protected:
  EvictionFollowTest()
      : cluster_(1, {"--eviction_interval_ms=50", "--metrics_port=0"}) {}

  absl::Status Push(const std::vector<uint64_t>& keys, uint64_t step) {
    const std::vector<float> gradients(keys.size() * kDim, 0.5f);
    return cluster_.training().Push("user", keys, gradients, step);
  }

  // Serving's rows of `keys` and how many of them it has no row for.
  std::vector<float> Lookup(const std::vector<uint64_t>& keys,
                            uint32_t* missing) {
    std::vector<float> rows(keys.size() * kDim);
    EXPECT_THAT(
        cluster_.client().Lookup("user", keys, absl::MakeSpan(rows), missing),
        IsOk());
    return rows;
  }

  v1::TableInfo Table(const std::string& name) {
    absl::StatusOr<std::vector<v1::TableInfo>> tables =
        cluster_.training().ListTables();
    EXPECT_THAT(tables, IsOk());
    for (const v1::TableInfo& info : *tables) {
      if (info.config().name() == name) return info;
    }
    ADD_FAILURE() << "no table " << name;
    return {};
  }

  ServingTestCluster cluster_;
};

TEST_F(EvictionFollowTest, EvictedRowsLeaveServingAndLaterCheckpoints) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  v1::TableConfig user = SgdTable("user", kDim);
  user.set_evict_after_steps(10);
  ASSERT_THAT(cluster_.training().CreateTable(user), IsOk());
  v1::TableConfig ads = SgdTable("ads", kDim);
  ads.set_admit_min_count(2);
  ASSERT_THAT(cluster_.training().CreateTable(ads), IsOk());
  ASSERT_THAT(cluster_.StartServing(), IsOk());

  const std::vector<uint64_t> idle = Keys(0, 50), busy = Keys(1000, 50);
  absl::StatusOr<std::vector<float>> initial =
      cluster_.Pull("user", idle, kDim);
  ASSERT_THAT(initial, IsOk());
  ASSERT_THAT(Push(idle, 1), IsOk());
  ASSERT_THAT(Push(busy, 1), IsOk());
  const std::vector<float> ad_gradients(2 * kDim, 0.5f);
  ASSERT_THAT(cluster_.training().Push("ads", {1, 2}, ad_gradients), IsOk());
  ASSERT_THAT(cluster_.training().Push("ads", {1, 2}, ad_gradients), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  uint32_t missing = 0;
  Lookup(idle, &missing);
  EXPECT_EQ(missing, 0u);

  // Step 11: the idle rows are 10 steps old, the busy ones updated now.
  ASSERT_THAT(Push(busy, 11), IsOk());
  const absl::Time deadline = Clock::Real()->Now() + absl::Seconds(20);
  std::vector<float> evicted = Lookup(idle, &missing);
  while (missing < idle.size() && Clock::Real()->Now() < deadline) {
    Clock::Real()->SleepFor(absl::Milliseconds(20));
    evicted = Lookup(idle, &missing);
  }
  EXPECT_EQ(missing, idle.size());
  EXPECT_THAT(evicted, Each(0.0f));  // The default unknown-key answer: zeros.
  std::vector<float> kept = Lookup(busy, &missing);
  EXPECT_EQ(missing, 0u);
  absl::StatusOr<std::vector<float>> trained =
      cluster_.Pull("user", busy, kDim);
  ASSERT_THAT(trained, IsOk());
  EXPECT_THAT(kept, ElementsAreArray(*trained));
  EXPECT_THAT(kept, Each(Ne(0.0f)));

  const v1::TableInfo info = Table("user");
  EXPECT_EQ(info.evicted_rows(), idle.size());
  EXPECT_EQ(info.admitted_keys(), idle.size() + busy.size());
  EXPECT_EQ(info.num_rows(), busy.size());
  EXPECT_EQ(Table("ads").admitted_keys(), 2u);
  EXPECT_EQ(Table("ads").rejected_gradients(), 2u);
  absl::StatusOr<int> port = MetricsPort(cluster_.shard(0));
  ASSERT_THAT(port, IsOk());
  absl::StatusOr<std::string> metrics = HttpGet(*port, "/metrics");
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(
      SampleValue(*metrics, "strata_table_evicted_rows_total{table=\"user\"}"),
      ::strata::testing::IsOkAndHolds(50.0));
  EXPECT_THAT(
      SampleValue(*metrics,
                  "strata_table_rejected_gradients_total{table=\"ads\"}"),
      ::strata::testing::IsOkAndHolds(2.0));

  // A checkpoint now lacks the evicted rows: restored, they read as never
  // written, on training and on serving.
  absl::StatusOr<std::vector<v1::CheckpointResponse>> checkpoint =
      cluster_.training().Checkpoint("after-eviction", 11);
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ((*checkpoint)[0].num_rows(), busy.size() + 2);
  ASSERT_THAT(Push(idle, 12), IsOk());  // Brings the idle rows back.
  EXPECT_EQ(Table("user").num_rows(), idle.size() + busy.size());
  ASSERT_THAT(cluster_.training().Restore("after-eviction"), IsOk());
  EXPECT_EQ(Table("user").num_rows(), busy.size());
  absl::StatusOr<std::vector<float>> restored =
      cluster_.Pull("user", idle, kDim);
  ASSERT_THAT(restored, IsOk());
  EXPECT_THAT(*restored, ElementsAreArray(*initial));
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  Lookup(idle, &missing);
  EXPECT_EQ(missing, idle.size());
  EXPECT_THAT(Lookup(busy, &missing), ElementsAreArray(*trained));
  EXPECT_EQ(missing, 0u);
}

}  // namespace
}  // namespace strata
