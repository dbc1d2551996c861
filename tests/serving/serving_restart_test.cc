// strata-serving killed, and a training shard killed, in the middle of a
// stream of pushes: serving resumes exactly, keeps answering, catches up.

#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServingTestCluster;
using ::strata::testing::SgdTable;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kCounterKey = 7;
constexpr uint64_t kFirstPushKey = 1000000;

// A table whose row of kCounterKey counts the pushes: zeros, SGD with
// learning rate 1, each push a gradient of -1.
v1::TableConfig CounterTable() {
  v1::TableConfig config = SgdTable("counters", 1);
  config.mutable_initializer()->set_type(v1::ZEROS);
  return config;
}

// The sequence in the log line "shard <shard>: resumed after sequence <n>".
uint64_t ResumedSequence(const std::string& log, uint32_t shard) {
  const std::string marker =
      absl::StrCat("shard ", shard, ": resumed after sequence ");
  const size_t at = log.find(marker);
  if (at == std::string::npos) return 0;
  const size_t start = at + marker.size();
  uint64_t sequence = 0;
  (void)absl::SimpleAtoi(log.substr(start, log.find(' ', start) - start),
                         &sequence);
  return sequence;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(ServingRestartTest, Kill9ResumesWhereItStoppedAndRowsNeverGoBack) {
  ServingTestCluster cluster(2);
  ASSERT_THAT(cluster.StartTraining(), IsOk());
  ASSERT_THAT(cluster.training().CreateTable(CounterTable()), IsOk());
  ASSERT_THAT(cluster.StartServing(), IsOk());
  const uint32_t counter_shard =
      cluster.training().ShardOf("counters", kCounterKey);

  std::atomic<bool> stop_pushing{false};
  std::atomic<bool> stop_reading{false};
  std::atomic<int> acked{0};
  std::atomic<int> regressions{0};
  std::atomic<int> lookups{0};
  std::thread pusher([&] {
    for (int i = 0; !stop_pushing.load(); ++i) {
      const std::vector<uint64_t> keys = {kCounterKey,
                                          kFirstPushKey + uint64_t(i)};
      const std::vector<float> gradients = {-1.0f, -1.0f};
      ASSERT_THAT(cluster.training().Push("counters", keys, gradients), IsOk());
      ++acked;
    }
  });
  std::thread reader([&] {
    float last = 0;
    const std::vector<uint64_t> keys = {kCounterKey};
    while (!stop_reading.load()) {
      float value = 0;
      // Fails while serving is down; the rows it returns never go back.
      if (cluster.client()
              .Lookup("counters", keys, absl::MakeSpan(&value, 1))
              .ok()) {
        if (value < last) ++regressions;
        last = value;
        ++lookups;
      }
    }
  });

  absl::StatusOr<v1::ServingStatusResponse> before =
      cluster.WaitForStatus([&](const v1::ServingStatusResponse& status) {
        return status.shards(counter_shard).applied_sequence() >= 40;
      });
  ASSERT_THAT(before, IsOk());
  const uint64_t applied_before =
      before->shards(counter_shard).applied_sequence();
  ASSERT_THAT(cluster.serving().Kill9(), IsOk());
  const int acked_at_kill = acked.load();
  ASSERT_THAT(cluster.serving().StartOnSamePort(), IsOk());
  ASSERT_THAT(cluster.serving().WaitForLog(
                  absl::StrCat("shard ", counter_shard, ": resumed after")),
              IsOk());
  // It went on from its stored position, with no snapshot.
  EXPECT_GE(ResumedSequence(cluster.serving().log(), counter_shard),
            applied_before);
  absl::StatusOr<v1::ServingStatusResponse> after =
      cluster.WaitForStatus([&](const v1::ServingStatusResponse& status) {
        return status.shards(counter_shard).applied_sequence() >
               applied_before + 20;
      });
  ASSERT_THAT(after, IsOk());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (acked.load() < acked_at_kill + 40 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GE(acked.load(), acked_at_kill + 40);
  stop_pushing = true;
  pusher.join();
  ASSERT_THAT(cluster.WaitUntilCaughtUp(), IsOk());
  stop_reading = true;
  reader.join();
  EXPECT_THAT(cluster.serving().log(), Not(HasSubstr("snapshot at")));
  EXPECT_EQ(regressions.load(), 0);
  EXPECT_GT(lookups.load(), 0);

  // No push lost, none applied twice: the counter counts them all, each
  // push's own row is 1, as on training.
  const int pushes = acked.load();
  std::vector<uint64_t> keys = {kCounterKey};
  for (int i = 0; i < pushes; ++i) keys.push_back(kFirstPushKey + i);
  absl::StatusOr<std::vector<float>> serving =
      cluster.Lookup("counters", keys, 1);
  absl::StatusOr<std::vector<float>> training =
      cluster.Pull("counters", keys, 1);
  ASSERT_THAT(serving, IsOk());
  ASSERT_THAT(training, IsOk());
  EXPECT_EQ((*serving)[0], static_cast<float>(pushes));
  EXPECT_THAT(*serving, ElementsAreArray(*training));
}

TEST(ServingRestartTest, ServesThroughATrainingShardOutageAndCatchesUp) {
  ServingTestCluster cluster(2);
  ASSERT_THAT(cluster.StartTraining(), IsOk());
  constexpr uint32_t kDim = 4;
  ASSERT_THAT(cluster.training().CreateTable(SgdTable("user", kDim)), IsOk());
  ASSERT_THAT(cluster.StartServing(), IsOk());
  std::mt19937_64 random(3);
  std::set<uint64_t> touched_set;
  auto push_some = [&](int batches) {
    for (int b = 0; b < batches; ++b) {
      std::vector<uint64_t> keys(32);
      for (uint64_t& key : keys) key = random() % 500;
      std::vector<float> gradients(keys.size() * kDim, 0.25f);
      ASSERT_THAT(cluster.training().Push("user", keys, gradients), IsOk());
      touched_set.insert(keys.begin(), keys.end());
    }
  };
  push_some(20);
  ASSERT_THAT(cluster.WaitUntilCaughtUp(), IsOk());
  std::vector<uint64_t> touched(touched_set.begin(), touched_set.end());
  absl::StatusOr<std::vector<float>> before =
      cluster.Lookup("user", touched, kDim);
  ASSERT_THAT(before, IsOk());

  const absl::Time killed = absl::Now();
  ASSERT_THAT(cluster.shard(1).Kill9(), IsOk());
  absl::StatusOr<v1::ServingStatusResponse> outage =
      cluster.WaitForStatus([](const v1::ServingStatusResponse& status) {
        return !status.shards(1).connected() &&
               status.shards(1).lag_seconds() > 0.05;
      });
  ASSERT_THAT(outage, IsOk());
  // The status tells of the dead shard at once, not at the idle timeout.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_TRUE(outage->shards(0).connected());
  EXPECT_FALSE(outage->shards(1).last_error().empty());
  // Still answering, with the last values, for the rows of both shards.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<float>> during =
        cluster.Lookup("user", touched, kDim);
    ASSERT_THAT(during, IsOk());
    EXPECT_THAT(*during, ElementsAreArray(*before));
  }

  ASSERT_THAT(cluster.shard(1).StartOnSamePort(), IsOk());
  push_some(10);
  absl::StatusOr<v1::ServingStatusResponse> caught_up =
      cluster.WaitUntilCaughtUp();
  ASSERT_THAT(caught_up, IsOk());
  EXPECT_TRUE(caught_up->shards(1).connected());
  EXPECT_NE(caught_up->shards(1).incarnation(),
            outage->shards(1).incarnation());
  // The restarted shard is a new incarnation: a second snapshot.
  EXPECT_EQ(Count(cluster.serving().log(), "shard 1: snapshot at"), 2u);
  touched.assign(touched_set.begin(), touched_set.end());
  absl::StatusOr<std::vector<float>> serving =
      cluster.Lookup("user", touched, kDim);
  absl::StatusOr<std::vector<float>> training =
      cluster.Pull("user", touched, kDim);
  ASSERT_THAT(serving, IsOk());
  ASSERT_THAT(training, IsOk());
  EXPECT_THAT(*serving, ElementsAreArray(*training));
}

}  // namespace
}  // namespace strata
