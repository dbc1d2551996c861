// Two workers train against two shard indexes of three replicas each
// (`replicated` mode, a real etcd): shard 0's primary is killed with kill -9
// mid-training, then its successor, then both come back. Training must end
// with exit 0 on both ranks, with a model that learned, and every replica
// group must end with its replicas at the same position.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/replicas.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/training_data.h"
#include "tests/testing/wait_until.h"
#include "worker/data/datagen.h"

namespace strata {
namespace {

using ::strata::testing::EtcdProcess;
using ::strata::testing::GenerateLearnableData;
using ::strata::testing::IsOk;
using ::strata::testing::ResultNumber;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::TempDir;
using ::strata::testing::WaitForPrimaryOf;
using ::strata::testing::WaitForReplicasToConverge;
using ::strata::testing::WaitUntil;

constexpr int kShards = 2;
constexpr int kReplicas = 3;
constexpr int kWorkers = 2;
constexpr int kRows = 200000;

using ReplicaGroup = std::vector<std::unique_ptr<ServerProcess>>;

class ReplicatedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(etcd_.Start(), IsOk());
    for (int s = 0; s < kShards; ++s) {
      for (int r = 0; r < kReplicas; ++r) {
        ServerProcessOptions options;
        options.flags = {
            absl::StrCat("--shard_index=", s),
            absl::StrCat("--num_shards=", kShards),
            absl::StrCat("--etcd_endpoints=", etcd_.endpoint()),
            absl::StrCat("--replica_id=r", r),
            absl::StrCat("--replicas=", kReplicas),
            "--durability=group",
            "--lease_ttl_ms=1000",
            "--cluster_name=training-test",
        };
        groups_[s].push_back(std::make_unique<ServerProcess>(options));
        ASSERT_THAT(groups_[s].back()->Start(), IsOk());
      }
    }
    auto generated = GenerateLearnableData(dir_.path(), kRows, 20000);
    ASSERT_THAT(generated.status(), IsOk());
    data_ = *generated;
  }

  // Shard i as its replicas joined by '|', in shard-index order.
  std::string ShardList() {
    std::vector<std::string> shards;
    for (const ReplicaGroup& group : groups_) {
      std::vector<std::string> replicas;
      for (const auto& replica : group) replicas.push_back(replica->address());
      shards.push_back(absl::StrJoin(replicas, "|"));
    }
    return absl::StrJoin(shards, ",");
  }

  std::unique_ptr<ServerProcess> Worker(int rank) {
    ServerProcessOptions options;
    options.binary = "strata-worker";
    options.daemon_flags = false;
    options.flags = {
        absl::StrCat("--shards=", ShardList()),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--num_workers=", kWorkers),
        "--job_id=replicated",
        absl::StrCat("--train_files=", data_.files[0]),
        absl::StrCat("--eval_files=", data_.holdout_file),
        "--batch_size=256",
        "--staleness=0",
        "--sparse_optimizer=adam",
        "--sparse_learning_rate=0.01",
        "--dense_learning_rate=0.001",
        "--progress_interval_s=0.5",
        "--collective_timeout_s=120",
        "--ps_retry_deadline_s=60",
        absl::StrCat("--result_file=", dir_.path(), "/result-", rank, ".json"),
    };
    return std::make_unique<ServerProcess>(options);
  }

  double EvalAuc(int rank) {
    return ResultNumber(absl::StrCat(dir_.path(), "/result-", rank, ".json"),
                        "eval_auc");
  }

  TempDir dir_{"replicated_training"};
  EtcdProcess etcd_;
  ReplicaGroup groups_[kShards];
  DatagenResult data_;
};

TEST_F(ReplicatedTrainingTest, TrainingSurvivesTwoKilledPrimaries) {
  for (const ReplicaGroup& group : groups_) {
    ASSERT_GE(WaitForPrimaryOf(group), 0);
  }
  std::unique_ptr<ServerProcess> workers[kWorkers];
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers[rank] = Worker(rank);
    ASSERT_THAT(workers[rank]->Launch(), IsOk());
  }
  ReplicaGroup& shard0 = groups_[0];
  ASSERT_THAT(workers[0]->WaitForLog(" step ", absl::Minutes(2)), IsOk());
  const int first = WaitForPrimaryOf(shard0);
  ASSERT_GE(first, 0);
  ASSERT_THAT(shard0[first]->Kill9(), IsOk());
  int second = -1;
  ASSERT_TRUE(WaitUntil(
      [&] {
        second = WaitForPrimaryOf(shard0);
        return second >= 0 && second != first;
      },
      absl::Seconds(30), absl::Milliseconds(50)));
  ASSERT_THAT(shard0[second]->Kill9(), IsOk());
  ASSERT_THAT(shard0[first]->StartOnSamePort(), IsOk());
  ASSERT_THAT(shard0[second]->StartOnSamePort(), IsOk());
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto exit = workers[rank]->Wait(absl::Minutes(5));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 0) << workers[rank]->log();
  }
  // A model that learned (the planted ceiling is about 0.84; 200k rows of
  // one epoch reach about 0.79).
  EXPECT_GT(EvalAuc(0), 0.75) << workers[0]->log();
  EXPECT_EQ(EvalAuc(1), EvalAuc(0));
  for (const ReplicaGroup& group : groups_) {
    EXPECT_TRUE(WaitForReplicasToConverge(group));
  }
}

}  // namespace
}  // namespace strata
