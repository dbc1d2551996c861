#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of the sample line that starts with `series` (name and labels).
double SampleValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double value = 0;
      EXPECT_TRUE(absl::SimpleAtod(line.substr(series.size() + 1), &value))
          << line;
      return value;
    }
  }
  ADD_FAILURE() << "no " << series << " in:\n" << text;
  return -1;
}

TEST(MetricsTest, CountersAndGaugesHaveHelpTypeAndLabels) {
  MetricFamilies families;
  prometheus::MetricFamily& requests =
      AddFamily(&families, "strata_test_requests_total", "Requests handled.",
                prometheus::MetricType::Counter);
  AddSample(requests, {{"method", "Pull"}, {"code", "OK"}}, 12);
  AddSample(requests, {{"method", "Push"}, {"code", "INTERNAL"}}, 3);
  AddGauge(&families, "strata_test_rows", "Rows stored.", 1234567);
  const std::string text = MetricsText(families);
  EXPECT_THAT(text, HasSubstr("# HELP strata_test_requests_total Requests "
                              "handled.\n# TYPE strata_test_requests_total "
                              "counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE strata_test_rows gauge\n"));
  EXPECT_EQ(SampleValue(text,
                        "strata_test_requests_total{method=\"Pull\",code="
                        "\"OK\"}"),
            12);
  EXPECT_EQ(SampleValue(text,
                        "strata_test_requests_total{method=\"Push\",code="
                        "\"INTERNAL\"}"),
            3);
  // Large integers come out whole, not in exponent notation.
  EXPECT_THAT(text, HasSubstr("strata_test_rows 1234567\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricFamilies families;
  AddSample(AddFamily(&families, "strata_test_rows", "Rows.",
                      prometheus::MetricType::Gauge),
            {{"table", "a\"b\\c\nd"}}, 1);
  EXPECT_THAT(MetricsText(families),
              HasSubstr("strata_test_rows{table=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfAndSum) {
  static constexpr double kBounds[] = {0.001, 0.01, 0.1};
  AtomicHistogram histogram(kBounds);
  for (double seconds : {0.0005, 0.0005, 0.005, 0.05, 0.5}) {
    histogram.Observe(seconds);
  }
  EXPECT_EQ(histogram.count(), 5u);
  MetricFamilies families;
  histogram.AddTo(AddFamily(&families, "strata_test_seconds", "Latency.",
                            prometheus::MetricType::Histogram),
                  {{"method", "Pull"}});
  const std::string text = MetricsText(families);
  EXPECT_THAT(text, HasSubstr("# TYPE strata_test_seconds histogram\n"));
  const std::string bucket = "strata_test_seconds_bucket{method=\"Pull\",le=";
  EXPECT_EQ(SampleValue(text, bucket + "\"0.001\"}"), 2);
  EXPECT_EQ(SampleValue(text, bucket + "\"0.01\"}"), 3);
  EXPECT_EQ(SampleValue(text, bucket + "\"0.1\"}"), 4);
  EXPECT_EQ(SampleValue(text, bucket + "\"+Inf\"}"), 5);
  EXPECT_EQ(SampleValue(text, "strata_test_seconds_count{method=\"Pull\"}"), 5);
  EXPECT_NEAR(SampleValue(text, "strata_test_seconds_sum{method=\"Pull\"}"),
              0.556, 1e-9);
}

TEST(MetricsTest, HistogramCountsEveryObservationFromManyThreads) {
  AtomicHistogram histogram;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&histogram] {
      for (int i = 0; i < 10000; ++i) histogram.Observe(0.002);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(histogram.count(), 40000u);
}

TEST(MetricsTest, QuantilesInterpolateInsideTheirBucket) {
  static constexpr double kBounds[] = {1, 2, 4};
  const uint64_t counts[] = {0, 10, 10, 0};
  EXPECT_DOUBLE_EQ(HistogramQuantile(kBounds, counts, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(HistogramQuantile(kBounds, counts, 0.25), 1.5);
  EXPECT_DOUBLE_EQ(HistogramQuantile(kBounds, counts, 0.75), 3.0);
  const uint64_t above[] = {0, 0, 0, 5};
  EXPECT_DOUBLE_EQ(HistogramQuantile(kBounds, above, 0.99), 4.0);
  const uint64_t none[] = {0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(HistogramQuantile(kBounds, none, 0.99), 0.0);
}

TEST(MetricsTest, ProcessMetricsDescribeThisProcess) {
  // Burn some CPU so that the counter is above zero.
  volatile double sink = 0;
  for (int i = 0; i < 50000000; ++i) sink = sink + i * 0.5;
  MetricFamilies families;
  AddProcessMetrics(&families);
  const std::string text = MetricsText(families);
  EXPECT_GT(SampleValue(text, "process_cpu_seconds_total"), 0);
  // A test binary holds at least a few MiB resident.
  EXPECT_GT(SampleValue(text, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(SampleValue(text, "process_virtual_memory_bytes"),
            SampleValue(text, "process_resident_memory_bytes"));
  EXPECT_GE(SampleValue(text, "process_threads"), 1);
  EXPECT_GE(SampleValue(text, "process_open_fds"), 3);
  const double start = SampleValue(text, "process_start_time_seconds");
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
}

TEST(MetricsTest, BuildInfoNamesProgramAndVersion) {
  MetricFamilies families;
  AddBuildInfo(&families, "strata-test");
  const std::string text = MetricsText(families);
  EXPECT_THAT(text, HasSubstr("# TYPE strata_build_info gauge\n"));
  EXPECT_THAT(text, HasSubstr("strata_build_info{program=\"strata-test\","
                              "version=\""));
  EXPECT_THAT(text, Not(HasSubstr("version=\"unknown\"")));
}

}  // namespace
}  // namespace strata
