#include "server/traffic_history.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/request_metrics.h"

namespace strata {
namespace {

TEST(TrafficHistoryTest, SamplesAreRatesAndIntervalP99s) {
  RequestMetrics metrics;
  TrafficHistory history(&metrics, /*capacity=*/3);
  const absl::Time start = absl::FromUnixSeconds(1000);
  history.Sample(start);  // The baseline: no sample yet.
  EXPECT_TRUE(history.Samples().empty());

  for (int i = 0; i < 10; ++i) {
    metrics.Record(ShardMethod::kPull, absl::StatusCode::kOk,
                   absl::Microseconds(200));
  }
  metrics.Record(ShardMethod::kPush, absl::StatusCode::kOk,
                 absl::Milliseconds(30));
  metrics.AddKeysPulled(5000);
  history.Sample(start + absl::Seconds(2));
  std::vector<TrafficSample> samples = history.Samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_DOUBLE_EQ(samples[0].pulls_per_second, 5.0);
  EXPECT_DOUBLE_EQ(samples[0].pushes_per_second, 0.5);
  EXPECT_DOUBLE_EQ(samples[0].keys_pulled_per_second, 2500.0);
  // In the 0.1-0.25 ms bucket, and in the 25-50 ms one.
  EXPECT_GT(samples[0].pull_p99_seconds, 0.0001);
  EXPECT_LE(samples[0].pull_p99_seconds, 0.00025);
  EXPECT_GT(samples[0].push_p99_seconds, 0.025);
  EXPECT_LE(samples[0].push_p99_seconds, 0.05);

  // An idle second: zero rates, and the p99 of no calls is 0, not the
  // earlier calls'.
  history.Sample(start + absl::Seconds(3));
  samples = history.Samples();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].pulls_per_second, 0.0);
  EXPECT_EQ(samples[1].pull_p99_seconds, 0.0);

  // Only the last `capacity` samples are kept, oldest first.
  history.Sample(start + absl::Seconds(4));
  history.Sample(start + absl::Seconds(5));
  samples = history.Samples();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples.front().time, start + absl::Seconds(3));
  EXPECT_EQ(samples.back().time, start + absl::Seconds(5));
}

}  // namespace
}  // namespace strata
