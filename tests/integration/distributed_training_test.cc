// strata-worker processes training against strata-server processes over
// loopback: the main job of the system, end to end.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/training_data.h"
#include "worker/data/datagen.h"

namespace strata {
namespace {

using ::strata::testing::GenerateLearnableData;
using ::strata::testing::IsOk;
using ::strata::testing::LearnableDataWorkerFlags;
using ::strata::testing::ProcessExit;
using ::strata::testing::ResultNumber;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

constexpr int kShards = 2;
constexpr int kWorkers = 2;
constexpr int kRows = 600000;
// With kRows rows (fewer than the quickstart's) the bar is looser.
constexpr double kMaxAucGap = 0.03;

class DistributedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& shard : shards_) {
      ServerProcessOptions options;
      options.flags = {"--durability=periodic"};
      shard = std::make_unique<ServerProcess>(options);
      ASSERT_THAT(shard->Start(), IsOk());
    }
    auto generated = GenerateLearnableData(dir_.path(), kRows, 20000);
    ASSERT_THAT(generated.status(), IsOk());
    data_ = *generated;
  }

  std::unique_ptr<ServerProcess> Worker(int rank,
                                        std::vector<std::string> extra) {
    ServerProcessOptions options;
    options.binary = "strata-worker";
    options.daemon_flags = false;
    options.flags = LearnableDataWorkerFlags(
        data_, absl::StrCat(shards_[0]->address(), ",", shards_[1]->address()),
        rank, kWorkers, job_id_,
        absl::StrCat(dir_.path(), "/result-", rank, ".json"));
    options.flags.push_back("--epochs=2");
    options.flags.insert(options.flags.end(), extra.begin(), extra.end());
    return std::make_unique<ServerProcess>(options);
  }

  double Result(int rank, const std::string& name) {
    return ResultNumber(absl::StrCat(dir_.path(), "/result-", rank, ".json"),
                        name);
  }

  TempDir dir_{"distributed_training"};
  std::unique_ptr<ServerProcess> shards_[kShards];
  DatagenResult data_;
  std::string job_id_ = "job-a";
};

TEST_F(DistributedTrainingTest, TwoWorkersReachThePlantedCeiling) {
  std::unique_ptr<ServerProcess> workers[kWorkers];
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers[rank] = Worker(rank, {});
    ASSERT_THAT(workers[rank]->Launch(), IsOk());
  }
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto exit = workers[rank]->Wait(absl::Minutes(5));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 0) << workers[rank]->log();
  }
  const double auc = Result(0, "eval_auc");
  EXPECT_EQ(Result(0, "eval_examples"), 20000);
  EXPECT_EQ(Result(0, "examples"), 2 * kRows);
  EXPECT_NEAR(auc, data_.holdout.auc, kMaxAucGap)
      << "planted ceiling " << data_.holdout.auc << "\n"
      << workers[0]->log();
  EXPECT_EQ(Result(1, "eval_auc"), auc);
  std::printf("held-out AUC %.5f, planted ceiling %.5f, gap %.5f\n", auc,
              data_.holdout.auc, data_.holdout.auc - auc);
  EXPECT_THAT(workers[0]->log(), HasSubstr("samples/s"));
}

TEST_F(DistributedTrainingTest, KilledShardRestartsAndTrainingFinishes) {
  std::unique_ptr<ServerProcess> workers[kWorkers];
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers[rank] = Worker(rank, {"--ps_retry_deadline_s=60"});
    ASSERT_THAT(workers[rank]->Launch(), IsOk());
  }
  // Mid-run: the first progress line of the first epoch.
  ASSERT_THAT(workers[0]->WaitForLog("step ", absl::Minutes(2)), IsOk());
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  ASSERT_THAT(shards_[1]->StartOnSamePort(), IsOk());
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto exit = workers[rank]->Wait(absl::Minutes(5));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 0) << workers[rank]->log();
  }
  EXPECT_NEAR(Result(0, "eval_auc"), data_.holdout.auc, kMaxAucGap)
      << workers[0]->log();
}

TEST_F(DistributedTrainingTest, ShardDownPastTheDeadlineStopsWorkersClearly) {
  std::unique_ptr<ServerProcess> worker =
      Worker(0, {"--num_workers=1", "--ps_retry_deadline_s=2"});
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  ASSERT_THAT(worker->Launch(), IsOk());
  auto exit = worker->Wait(absl::Minutes(1));
  ASSERT_THAT(exit.status(), IsOk());
  EXPECT_EQ(exit->exit_code, 1);
  EXPECT_THAT(worker->log(), HasSubstr(shards_[1]->address()));
}

TEST_F(DistributedTrainingTest, MetricsPortShowsStepsExamplesAndLossMoving) {
  // A few hundred steps are enough for two scrapes while training runs; two
  // whole epochs on one rank took minutes on a loaded machine.
  std::unique_ptr<ServerProcess> worker =
      Worker(0, {"--num_workers=1", "--metrics_port=0",
                 "--progress_interval_s=0.2", "--epochs=1", "--max_steps=400"});
  ASSERT_THAT(worker->Launch(), IsOk());
  ASSERT_THAT(worker->WaitForLog("metrics_port=", absl::Seconds(30)), IsOk());
  auto port = ::strata::testing::MetricsPort(*worker);
  ASSERT_THAT(port.status(), IsOk());
  ASSERT_THAT(::strata::testing::HttpGet(*port, "/healthz").status(), IsOk());
  // Two scrapes while training runs: every counter moves forward.
  auto scrape = [&](const char* series) {
    auto text = ::strata::testing::HttpGet(*port, "/metrics");
    EXPECT_THAT(text.status(), IsOk());
    auto value = ::strata::testing::SampleValue(text.ok() ? *text : "", series);
    return value.ok() ? *value : -1.0;
  };
  ASSERT_THAT(worker->WaitForLog("samples/s", absl::Seconds(60)), IsOk());
  const double steps = scrape("strata_worker_global_step");
  const double examples = scrape("strata_worker_examples_total");
  const double pushed = scrape("strata_worker_pushed_keys_total");
  EXPECT_GT(steps, 0);
  EXPECT_GT(examples, 0);
  EXPECT_GT(scrape("strata_worker_loss"), 0);
  EXPECT_GT(scrape("strata_worker_samples_per_second"), 0);
  // Both counters are waited for: they were scraped one after the other,
  // so a step could land between the two scrapes, and that step alone
  // moves the step past `steps` but not the examples past `examples`.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while ((scrape("strata_worker_global_step") <= steps ||
          scrape("strata_worker_examples_total") <= examples) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GT(scrape("strata_worker_global_step"), steps);
  EXPECT_GT(scrape("strata_worker_examples_total"), examples);
  EXPECT_GE(scrape("strata_worker_pushed_keys_total"), pushed);
  EXPECT_EQ(scrape("strata_worker_malformed_lines_total"), 0);
  // Inside ctest's 300 s, so that a worker that does not finish fails here
  // with its log.
  auto exit = worker->Wait(absl::Minutes(3));
  ASSERT_THAT(exit.status(), IsOk());
  EXPECT_EQ(exit->exit_code, 0) << worker->log();
}

TEST_F(DistributedTrainingTest, BadFlagsExitWithUsageErrors) {
  struct Case {
    std::string flag;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--rank=5", "--rank=5 is not in 0..--num_workers-1"},
      {"--interaction=cross", "unknown interaction \"cross\""},
      {"--top_mlp=128,x", "--top_mlp: \"x\" is not a width"},
      {"--device=tpu", "--device=tpu: want cpu or cuda"},
      {"--sparse_optimizer=rmsprop", "unknown \"rmsprop\""},
      {"--restore", "--restore needs --checkpoint_dir"},
      {"--full_checkpoint_every=0", "--full_checkpoint_every must be >= 1"},
      {"--metrics_port=70000", "--metrics_port=70000 is not -1 or 0..65535"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<ServerProcess> worker = Worker(0, {c.flag});
    ASSERT_THAT(worker->Launch(), IsOk());
    auto exit = worker->Wait(absl::Seconds(30));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 2) << c.flag;
    EXPECT_THAT(worker->log(), HasSubstr(c.message)) << c.flag;
  }
}

}  // namespace
}  // namespace strata
