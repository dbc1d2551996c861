#include "worker/training/status_page.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TrainingSnapshot Trained() {
  TrainingSnapshot now;
  now.step = 1234;
  now.rank_examples = 600000;
  now.global_examples = 1200000;
  now.loss = 0.43125;
  now.samples_per_second = 51234;
  now.pushed_keys = 777;
  return now;
}

TEST(WorkerStatusPageTest, ShowsTheNumbersWithTheirIds) {
  TrainingSnapshot now = Trained();
  now.evaluated = true;
  now.eval_auc = 0.8125;
  now.eval_log_loss = 0.45;
  const std::string page = RenderWorkerStatusPage(
      {1, 2, "cpu", "dlrm <dot>", 4}, now, {}, /*refresh_seconds=*/2);
  EXPECT_THAT(page, HasSubstr("<span id=\"rank\">1</span>"));
  EXPECT_THAT(page, HasSubstr("<span id=\"num-workers\">2</span>"));
  EXPECT_THAT(page, HasSubstr("<span id=\"num-shards\">4</span>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"step\">1234</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"examples\">600000</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"job-examples\">1200000</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"loss\">0.43125</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"pushed-keys\">777</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"eval-auc\">0.81250</td>"));
  EXPECT_THAT(page, HasSubstr("dlrm &lt;dot&gt;"));
  EXPECT_THAT(page, Not(HasSubstr("<dot>")));
  for (const char* chart :
       {"chart-samples", "chart-steps", "chart-loss", "chart-auc"}) {
    EXPECT_THAT(page, HasSubstr(chart));
  }
}

TEST(WorkerStatusPageTest, SaysNotYetBeforeTheFirstEvaluation) {
  const std::string page = RenderWorkerStatusPage({}, Trained(), {}, 2);
  EXPECT_THAT(page, HasSubstr("<td id=\"eval-auc\">not yet</td>"));
  EXPECT_THAT(page, HasSubstr("<td id=\"eval-log-loss\">not yet</td>"));
}

TEST(WorkerStatusPageTest, ChartsRatesOfTheReadings) {
  RateHistory history({});
  const absl::Time start = absl::FromUnixSeconds(1000);
  TrainingSnapshot now = Trained();
  history.Add(start, WorkerReading(now));
  now.global_examples += 40000;
  now.step += 20;
  now.loss = 0.5;
  now.evaluated = true;
  now.eval_auc = 0.75;
  history.Add(start + absl::Seconds(2), WorkerReading(now));
  const std::vector<RateSample> samples = history.Samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_DOUBLE_EQ(samples[0].rates[0], 20000);  // samples/s
  EXPECT_DOUBLE_EQ(samples[0].rates[1], 10);     // steps/s
  EXPECT_DOUBLE_EQ(samples[0].gauges[0], 0.5);
  EXPECT_DOUBLE_EQ(samples[0].gauges[1], 0.75);
  const std::string page = RenderWorkerStatusPage({}, now, samples, 2);
  EXPECT_THAT(page, HasSubstr("data-name=\"samples\""));
  EXPECT_THAT(page, HasSubstr("data-name=\"AUC\""));
}

}  // namespace
}  // namespace strata
