#include "common/rate_history.h"

#include <atomic>

#include "gtest/gtest.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

TEST(RateHistoryTest, RatesP99sAndGaugesPerInterval) {
  static constexpr double kBounds[] = {0.001, 0.01};
  RateHistory history({absl::MakeConstSpan(kBounds)}, /*capacity=*/2);
  const absl::Time start = absl::FromUnixSeconds(100);
  history.Add(start, {{10, 0}, {{0, 0, 0}}, {0.5}});
  EXPECT_TRUE(history.Samples().empty());  // A baseline only.

  history.Add(start + absl::Seconds(2), {{30, 4}, {{0, 100, 0}}, {1.5}});
  std::vector<RateSample> samples = history.Samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].rates, (std::vector<double>{10, 2}));
  ASSERT_EQ(samples[0].p99s.size(), 1u);
  EXPECT_GT(samples[0].p99s[0], 0.001);
  EXPECT_LE(samples[0].p99s[0], 0.01);
  EXPECT_EQ(samples[0].gauges, (std::vector<double>{1.5}));

  // A counter that went backwards (a restart) counts as 0, not as huge.
  history.Add(start + absl::Seconds(3), {{5, 4}, {{0, 100, 0}}, {0}});
  history.Add(start + absl::Seconds(4), {{6, 4}, {{0, 100, 0}}, {0}});
  samples = history.Samples();
  ASSERT_EQ(samples.size(), 2u);  // The capacity.
  EXPECT_EQ(samples[0].rates[0], 0);
  EXPECT_EQ(samples[0].p99s[0], 0);  // No observations in that interval.
  EXPECT_EQ(samples[1].rates[0], 1);
}

TEST(PeriodicTaskTest, RunsRepeatedlyAndItsDestructorStopsIt) {
  std::atomic<int> calls{0};
  {
    PeriodicTask task(absl::Milliseconds(10), [&calls] { ++calls; });
    EXPECT_TRUE(testing::WaitUntil([&] { return calls.load() >= 3; },
                                   absl::Seconds(30), absl::Milliseconds(5)));
  }
}

}  // namespace
}  // namespace strata
