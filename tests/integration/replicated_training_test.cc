// Two workers train against two shard indexes of three replicas each
// (`replicated` mode, a real etcd), next to a client that pushes numbered
// updates to a table of its own, and a serving PS that follows both groups.
// Shard 0's primary is killed with kill -9 mid-training, then its
// successor, then both come back. Training must end with exit 0 on both
// ranks, with a model that learned; every replica group must end with its
// replicas at the same position; and the numbered client's rows, on the
// final primaries and on the serving PS, must equal a local reference: the
// same optimizer applied to the acknowledged pushes in order.
//
// Push i sends a gradient for a key of its own (so a lost or doubled push
// shows in that row) and for one of a few shared keys on both shards (so
// the order of application shows: Adagrad is not commutative).

#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "embedding/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "server/table_config_proto.h"
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
using ::strata::testing::LearnableDataWorkerFlags;
using ::strata::testing::ReplicaFlags;
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

// The numbered client's table.
constexpr char kAuditTable[] = "audit";
constexpr uint32_t kAuditDim = 4;
constexpr uint64_t kSharedKeys = 16;
constexpr uint64_t kOwnKeyBase = 1000000;
constexpr int kMaxAuditPushes = 20000;

v1::TableConfig AuditTable() {
  v1::TableConfig config;
  config.set_name(kAuditTable);
  config.set_dim(kAuditDim);
  config.mutable_initializer()->set_type(v1::ZEROS);
  config.mutable_optimizer()->set_type(v1::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.05f);
  config.mutable_optimizer()->set_initial_accumulator(0.1f);
  return config;
}

std::vector<uint64_t> AuditKeys(int push) {
  return {static_cast<uint64_t>(push) % kSharedKeys, kOwnKeyBase + push};
}

// Gradients of push i, different for every push and every element.
std::vector<float> AuditGradients(int push) {
  std::vector<float> gradients(2 * kAuditDim);
  for (size_t e = 0; e < gradients.size(); ++e) {
    gradients[e] = static_cast<float>((push * 7 + e * 3) % 11) / 4.0f - 1.2f;
  }
  return gradients;
}

// The rows of `keys` after pushes 0..count-1, applied in order by the
// shard's own optimizer code.
std::vector<float> ReferenceRows(int count, const std::vector<uint64_t>& keys) {
  absl::StatusOr<EmbeddingTableConfig> config =
      TableConfigFromProto(AuditTable());
  EXPECT_TRUE(config.ok()) << config.status();
  std::unique_ptr<Optimizer> optimizer =
      Optimizer::Create(config->optimizer, kAuditDim);
  // Per key: kAuditDim weights (zeros init), then the optimizer's state.
  absl::flat_hash_map<uint64_t, std::vector<float>> rows;
  for (int push = 0; push < count; ++push) {
    const std::vector<uint64_t> push_keys = AuditKeys(push);
    const std::vector<float> gradients = AuditGradients(push);
    for (size_t k = 0; k < push_keys.size(); ++k) {
      auto [it, fresh] = rows.try_emplace(push_keys[k]);
      std::vector<float>& row = it->second;
      if (fresh) {
        row.assign(kAuditDim + optimizer->state_dim(), 0.0f);
        optimizer->InitState(row.data() + kAuditDim);
      }
      optimizer->Apply(gradients.data() + k * kAuditDim, row.data(),
                       row.data() + kAuditDim);
    }
  }
  std::vector<float> out;
  for (uint64_t key : keys) {
    const std::vector<float>& row = rows.at(key);
    out.insert(out.end(), row.begin(), row.begin() + kAuditDim);
  }
  return out;
}

using ReplicaGroup = std::vector<std::unique_ptr<ServerProcess>>;

class ReplicatedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(etcd_.Start(), IsOk());
    for (int s = 0; s < kShards; ++s) {
      for (int r = 0; r < kReplicas; ++r) {
        ServerProcessOptions options;
        options.flags =
            ReplicaFlags(etcd_.endpoint(), r, kReplicas, "training-test");
        options.flags.push_back(absl::StrCat("--shard_index=", s));
        options.flags.push_back(absl::StrCat("--num_shards=", kShards));
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
    options.flags = LearnableDataWorkerFlags(
        data_, ShardList(), rank, kWorkers, "replicated",
        absl::StrCat(dir_.path(), "/result-", rank, ".json"));
    options.flags.push_back("--ps_retry_deadline_s=60");
    return std::make_unique<ServerProcess>(options);
  }

  std::unique_ptr<PsClient> Client() {
    PsClientOptions options;
    options.shard_addresses = absl::StrSplit(ShardList(), ',');
    options.retry_deadline = absl::Seconds(60);
    options.rpc_timeout = absl::Seconds(5);
    options.initial_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client.status(), IsOk());
    return client.ok() ? std::move(*client) : nullptr;
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

TEST_F(ReplicatedTrainingTest,
       TrainingAndNumberedPushesSurviveTwoKilledPrimaries) {
  for (const ReplicaGroup& group : groups_) {
    ASSERT_GE(WaitForPrimaryOf(group), 0);
  }
  std::unique_ptr<PsClient> client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_THAT(client->CreateTable(AuditTable()), IsOk());
  ServerProcessOptions serving_options;
  serving_options.binary = "strata-serving";
  serving_options.flags = {absl::StrCat("--shards=", ShardList())};
  ServerProcess serving(serving_options);
  ASSERT_THAT(serving.Start(), IsOk());

  // The numbered client: pushes one at a time, each retried across the
  // failovers until acknowledged, until told to stop.
  std::atomic<bool> stop_pushing{false};
  std::atomic<int> acknowledged{0};
  absl::Status push_error;
  std::thread pusher([&] {
    for (int i = 0; i < kMaxAuditPushes && !stop_pushing.load(); ++i) {
      absl::Status s =
          client->Push(kAuditTable, AuditKeys(i), AuditGradients(i));
      if (!s.ok()) {
        push_error = s;
        return;
      }
      acknowledged.fetch_add(1);
      // Paced so that the pushes span the whole training run.
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  // Waits for `more` acknowledgements past the count now: the numbered
  // client gets through whatever just happened to the group.
  auto wait_for_more_acks = [&](int more) {
    const int target = acknowledged.load() + more;
    return WaitUntil([&] { return acknowledged.load() >= target; },
                     absl::Seconds(60), absl::Milliseconds(10));
  };

  std::unique_ptr<ServerProcess> workers[kWorkers];
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers[rank] = Worker(rank);
    ASSERT_THAT(workers[rank]->Launch(), IsOk());
  }
  ReplicaGroup& shard0 = groups_[0];
  ASSERT_THAT(workers[0]->WaitForLog(" step ", absl::Minutes(2)), IsOk());
  ASSERT_TRUE(wait_for_more_acks(50));
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
  ASSERT_TRUE(wait_for_more_acks(50))
      << "no push acknowledged after r" << first << " was killed";
  ASSERT_THAT(shard0[second]->Kill9(), IsOk());
  ASSERT_THAT(shard0[first]->StartOnSamePort(), IsOk());
  ASSERT_THAT(shard0[second]->StartOnSamePort(), IsOk());
  ASSERT_TRUE(wait_for_more_acks(50))
      << "no push acknowledged after r" << second << " was killed";
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto exit = workers[rank]->Wait(absl::Minutes(5));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 0) << workers[rank]->log();
  }
  stop_pushing.store(true);
  pusher.join();
  ASSERT_THAT(push_error, IsOk());
  const int pushes = acknowledged.load();
  std::cout << pushes << " numbered pushes acknowledged" << std::endl;

  // A model that learned (the planted ceiling is about 0.84; 200k rows of
  // one epoch reach about 0.79).
  EXPECT_GT(EvalAuc(0), 0.75) << workers[0]->log();
  EXPECT_EQ(EvalAuc(1), EvalAuc(0));
  for (const ReplicaGroup& group : groups_) {
    EXPECT_TRUE(WaitForReplicasToConverge(group));
  }

  // Every acknowledged push once, in order: the final primaries' rows and
  // the serving PS's rows equal the local reference.
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < kSharedKeys; ++key) keys.push_back(key);
  for (int i = 0; i < pushes; ++i) keys.push_back(kOwnKeyBase + i);
  const std::vector<float> reference = ReferenceRows(pushes, keys);
  std::vector<float> rows(keys.size() * kAuditDim);
  ASSERT_THAT(client->Pull(kAuditTable, keys, absl::MakeSpan(rows)), IsOk());
  int wrong = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    if (rows[e] != reference[e]) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "of " << rows.size()
                      << " elements differ from the reference; first key "
                      << keys[0] << ": " << rows[0] << " vs " << reference[0];

  ServingClientOptions serving_client_options;
  serving_client_options.endpoints = {serving.address()};
  absl::StatusOr<std::unique_ptr<ServingClient>> serving_client =
      ServingClient::Create(serving_client_options);
  ASSERT_THAT(serving_client.status(), IsOk());
  std::vector<float> served(rows.size());
  EXPECT_TRUE(WaitUntil(
      [&] {
        uint32_t missing = 0;
        return (*serving_client)
                   ->Lookup(kAuditTable, keys, absl::MakeSpan(served), &missing)
                   .ok() &&
               missing == 0 && served == reference;
      },
      absl::Seconds(60), absl::Milliseconds(100)))
      << "the serving PS never held the reference rows";
}

}  // namespace
}  // namespace strata
