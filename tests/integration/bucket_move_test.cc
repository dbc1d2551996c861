// Online bucket moves end to end: real strata-server processes, stratactl
// move-buckets as users run it, a trainer pushing all along. Every push is
// applied exactly once across the moves (rows equal, bit for bit, those of
// a one-shard reference cluster given the same pushes in the same order),
// a serving PS follows the shards a reshard adds and removes, and a kill -9
// of the source or the target mid-copy leaves the source serving, loses
// nothing, and the move finishes when run again. Between replicated shards,
// the followers promoted after a move serve what their primaries did.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "common/file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/replicas.h"
#include "tests/testing/served_rows.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 4;
constexpr char kTable[] = "clicks";
constexpr uint64_t kKeySpace = 6000;

v1::TableConfig AdagradTable() {
  v1::TableConfig config;
  config.set_name(kTable);
  config.set_dim(kDim);
  config.set_seed(9);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-0.1f);
  config.mutable_initializer()->set_max(0.1f);
  config.mutable_optimizer()->set_type(v1::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.2f);
  return config;
}

// Step `step`'s keys (distinct) and gradients: a pure function of the step.
void StepBatch(uint64_t step, size_t n, std::vector<uint64_t>& keys,
               std::vector<float>& gradients, uint64_t first_key = 1) {
  keys.clear();
  gradients.clear();
  uint64_t state = step * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    keys.push_back(first_key + (state >> 33) % kKeySpace);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (size_t i = 0; i < keys.size() * kDim; ++i) {
    gradients.push_back(static_cast<float>((step + i) % 13) / 13.0f - 0.4f);
  }
}

class BucketMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int s = 0; s < 2; ++s) {
      ServerProcessOptions options;
      options.flags = {"--num_shards=2", absl::StrCat("--shard_index=", s)};
      shards_.push_back(std::make_unique<ServerProcess>(options));
      ASSERT_THAT(shards_.back()->Start(), IsOk());
    }
    addresses_ = {shards_[0]->address(), shards_[1]->address()};
    StartReferenceAndClients();
  }

  // The one-shard reference, a client of it and one of the cluster at
  // addresses_, each with the table.
  void StartReferenceAndClients() {
    ServerProcessOptions one;
    one.flags = {"--num_shards=1", "--shard_index=0"};
    reference_ = std::make_unique<ServerProcess>(one);
    ASSERT_THAT(reference_->Start(), IsOk());
    cluster_ = MakeClient(addresses_);
    local_ = MakeClient({reference_->address()});
    ASSERT_NE(cluster_, nullptr);
    ASSERT_NE(local_, nullptr);
    ASSERT_THAT(cluster_->CreateTable(AdagradTable()), IsOk());
    ASSERT_THAT(local_->CreateTable(AdagradTable()), IsOk());
  }

  static std::unique_ptr<PsClient> MakeClient(
      std::vector<std::string> addresses) {
    PsClientOptions options;
    options.shard_addresses = std::move(addresses);
    options.retry_deadline = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? std::move(*client) : nullptr;
  }

  // The same push on the cluster and on the reference (`first_key`: where
  // the pusher's keys start).
  absl::Status PushStep(uint64_t step, size_t n, PsClient* cluster = nullptr,
                        uint64_t first_key = 1) {
    std::vector<uint64_t> keys;
    std::vector<float> gradients;
    StepBatch(step, n, keys, gradients, first_key);
    absl::Status pushed = (cluster != nullptr ? cluster : cluster_.get())
                              ->Push(kTable, keys, gradients);
    if (!pushed.ok()) return pushed;
    return local_->Push(kTable, keys, gradients);
  }

  std::vector<float> PullAll(PsClient& client, uint64_t key_space = kKeySpace) {
    std::vector<uint64_t> keys;
    for (uint64_t key = 1; key <= key_space; ++key) keys.push_back(key);
    std::vector<float> rows(keys.size() * kDim);
    EXPECT_THAT(client.Pull(kTable, keys, absl::MakeSpan(rows)), IsOk());
    return rows;
  }

  // The serving PS follows shards 0-2 only and holds the reference's rows
  // (keys never pushed answer the initializer's values on both).
  void ExpectServingFollowsTheThreeShards(const std::string& serving) {
    ServingClientOptions options;
    options.endpoints = {serving};
    absl::StatusOr<std::unique_ptr<ServingClient>> client =
        ServingClient::Create(options);
    ASSERT_THAT(client.status(), IsOk());
    std::vector<int> followed;
    EXPECT_TRUE(WaitUntil(
        [&] {
          absl::StatusOr<v1::ServingStatusResponse> status =
              (*client)->Status();
          followed.clear();
          if (!status.ok()) return false;
          for (const v1::FollowedShard& shard : status->shards()) {
            followed.push_back(static_cast<int>(shard.shard_index()));
          }
          return followed == std::vector<int>{0, 1, 2};
        },
        absl::Seconds(60)))
        << "followed: " << absl::StrJoin(followed, ",");
    std::vector<uint64_t> keys;
    for (uint64_t key = 1; key <= 2 * kKeySpace; ++key) keys.push_back(key);
    EXPECT_TRUE(testing::ServesRows(**client, kTable, keys,
                                    PullAll(*local_, 2 * kKeySpace)));
  }

  uint64_t Rows(PsClient& client) {
    absl::StatusOr<std::vector<v1::TableInfo>> tables = client.ListTables();
    EXPECT_THAT(tables, IsOk());
    return tables.ok() && !tables->empty() ? (*tables)[0].num_rows() : 0;
  }

  // The rows the shard at `address` holds (0 while it does not answer).
  uint64_t RowsAt(const std::string& address) {
    std::unique_ptr<PsClient> one = MakeClient({address});
    absl::StatusOr<std::vector<v1::StatsResponse>> stats = one->Stats();
    if (!stats.ok() || (*stats)[0].tables().empty()) return 0;
    return (*stats)[0].tables(0).num_rows();
  }

  uint64_t RowsOn(int shard) { return RowsAt(shards_[shard]->address()); }

  // Pushes step after step (PushStep, `keys` keys each) on a thread of its
  // own until Stop(), which returns the first failure; stopped when
  // destroyed, so a test that ends early leaves no thread behind.
  class Trainer {
   public:
    Trainer(BucketMoveTest& test, size_t keys)
        : thread_([this, &test, keys] {
            while (!stop_.load()) {
              absl::Status pushed = test.PushStep(steps_.load(), keys);
              if (!pushed.ok()) {
                failed_ = pushed;
                return;
              }
              ++steps_;
            }
          }) {}
    ~Trainer() {
      if (thread_.joinable()) Stop().IgnoreError();
    }

    uint64_t steps() const { return steps_.load(); }
    // True once `n` steps are done (false after 60 s or a failed push).
    bool WaitForSteps(uint64_t n) {
      return WaitUntil([&] { return steps_.load() >= n; }, absl::Seconds(60));
    }
    absl::Status Stop() {
      stop_ = true;
      thread_.join();
      return failed_;
    }

   private:
    std::atomic<uint64_t> steps_{0};
    std::atomic<bool> stop_{false};
    absl::Status failed_;
    std::thread thread_;  // last: it starts once the others exist
  };

  uint64_t KeysPushedOn(int shard) {
    std::unique_ptr<PsClient> one = MakeClient({shards_[shard]->address()});
    absl::StatusOr<std::vector<v1::StatsResponse>> stats = one->Stats();
    EXPECT_THAT(stats, IsOk());
    return stats.ok() ? (*stats)[0].keys_pushed() : 0;
  }

  // Rows, and the rows' count over the shards, equal the reference's.
  void ExpectClusterEqualsReference(uint64_t key_space = kKeySpace) {
    const std::vector<float> cluster = PullAll(*cluster_, key_space);
    const std::vector<float> local = PullAll(*local_, key_space);
    ASSERT_EQ(cluster.size(), local.size());
    for (size_t i = 0; i < cluster.size(); ++i) {
      ASSERT_EQ(cluster[i], local[i]) << "key " << 1 + i / kDim;
    }
    EXPECT_EQ(Rows(*cluster_), Rows(*local_));
  }

  std::unique_ptr<ServerProcess> MoveBuckets(
      std::vector<std::string> flags, const char* command = "move-buckets") {
    ServerProcessOptions tool;
    tool.binary = "stratactl";
    tool.daemon_flags = false;
    tool.flags = {absl::StrCat("--shards=", absl::StrJoin(addresses_, ",")),
                  command};
    tool.flags.insert(tool.flags.end(), flags.begin(), flags.end());
    auto process = std::make_unique<ServerProcess>(tool);
    EXPECT_THAT(process->Launch(), IsOk());
    return process;
  }

  // A checkpoint of the cluster as it stands, resharded onto one new shard
  // by stratactl, holds exactly the reference's rows: a partial copy that a
  // killed move left on a shard (which no client reads) is skipped.
  void ExpectReshardedCheckpointEqualsReference(bool partial_copy_left) {
    ASSERT_THAT(cluster_->Checkpoint("mid-move", 7).status(), IsOk());
    testing::TempDir onto("reshard_onto_one");
    const std::string target = onto.path() + "/shard0";
    ServerProcessOptions tool;
    tool.binary = "stratactl";
    tool.daemon_flags = false;
    tool.flags = {"reshard-checkpoint", "mid-move",
                  absl::StrCat("--from=", shards_[0]->data_dir(), ",",
                               shards_[1]->data_dir()),
                  absl::StrCat("--to=", target)};
    ServerProcess reshard(tool);
    ASSERT_THAT(reshard.Launch(), IsOk());
    ASSERT_EQ(ExitCode(reshard), 0) << reshard.log();
    if (partial_copy_left) {
      EXPECT_THAT(reshard.log(), HasSubstr("rows of shard 1 in buckets the "
                                           "checkpoint's shard map gives"));
    }
    ServerProcessOptions one;
    one.data_dir = target;
    one.flags = {"--num_shards=1", "--shard_index=0"};
    ServerProcess merged(one);
    ASSERT_THAT(merged.Start(), IsOk());
    std::unique_ptr<PsClient> client = MakeClient({merged.address()});
    EXPECT_EQ(PullAll(*client), PullAll(*local_));
    EXPECT_EQ(Rows(*client), Rows(*local_));
  }

  static int ExitCode(ServerProcess& process) {
    absl::StatusOr<testing::ProcessExit> exit =
        process.Wait(absl::Seconds(120));
    EXPECT_THAT(exit, IsOk());
    return exit.ok() ? exit->exit_code : -1;
  }

  std::vector<std::unique_ptr<ServerProcess>> shards_;
  // The cluster's shard addresses as clients and stratactl take them (a
  // replicated shard's replicas joined by '|').
  std::vector<std::string> addresses_;
  std::unique_ptr<ServerProcess> reference_;
  std::unique_ptr<PsClient> cluster_;
  std::unique_ptr<PsClient> local_;
};

TEST_F(BucketMoveTest, PushesDuringMovesBothWaysApplyExactlyOnce) {
  Trainer trainer(*this, 300);
  ASSERT_TRUE(trainer.WaitForSteps(20));
  std::unique_ptr<ServerProcess> there =
      MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1500",
                   "--buckets_per_step=256"});
  EXPECT_EQ(ExitCode(*there), 0) << there->log();
  EXPECT_THAT(there->log(), HasSubstr("moved 1500 buckets"));
  const uint64_t after_first = trainer.steps();
  std::unique_ptr<ServerProcess> back =
      MoveBuckets({"--to_shard=0", "--from_shard=1", "--count=700",
                   "--buckets_per_step=100"});
  EXPECT_EQ(ExitCode(*back), 0) << back->log();
  // Training goes on after the moves (the moved optimizer state in use).
  const uint64_t after_moves = trainer.steps();
  ASSERT_TRUE(trainer.WaitForSteps(after_moves + 20));
  ASSERT_THAT(trainer.Stop(), IsOk());
  EXPECT_GT(after_moves, after_first) << "no push ran during the moves";

  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  EXPECT_EQ(cluster_->shard_map()->BucketsOf(0).size(), 2048u - 1500 + 700);
  EXPECT_EQ(cluster_->shard_map()->version(), 1u + 6 + 7);
  ExpectClusterEqualsReference();
}

TEST_F(BucketMoveTest, GrowsToFourShardsAndShrinksToThreeWhileTwoTrainersPush) {
  for (int s = 2; s < 4; ++s) {
    ServerProcessOptions options;
    options.flags = {"--num_shards=4", absl::StrCat("--shard_index=", s)};
    shards_.push_back(std::make_unique<ServerProcess>(options));
    ASSERT_THAT(shards_.back()->Start(), IsOk());
  }
  // A serving PS given the two first shards only: it finds the others in
  // the shard map as the reshard adds them.
  ServerProcessOptions serving_options;
  serving_options.binary = "strata-serving";
  serving_options.flags = {absl::StrCat("--shards=", shards_[0]->address(), ",",
                                        shards_[1]->address()),
                           "--shard_map_check_s=0.2",
                           "--unknown_keys=initializer"};
  ServerProcess serving(serving_options);
  ASSERT_THAT(serving.Start(), IsOk());
  // Two trainers, each with its own keys (so each key's pushes keep their
  // order on both clusters) and its own client of the two first shards.
  std::atomic<uint64_t> steps[2] = {0, 0};
  std::atomic<bool> stop{false};
  absl::Status failed[2];
  std::vector<std::thread> trainers;
  for (int t = 0; t < 2; ++t) {
    trainers.emplace_back([&, t] {
      std::unique_ptr<PsClient> client =
          MakeClient({shards_[0]->address(), shards_[1]->address()});
      std::vector<uint64_t> keys;
      std::vector<float> rows;
      while (!stop.load() && client != nullptr) {
        // A training step: pull its rows, then push its gradients.
        StepBatch(steps[t].load(), 200, keys, rows, 1 + t * kKeySpace);
        failed[t] = client->Pull(kTable, keys, absl::MakeSpan(rows));
        if (!failed[t].ok()) return;
        failed[t] =
            PushStep(steps[t].load(), 200, client.get(), 1 + t * kKeySpace);
        if (!failed[t].ok()) return;
        ++steps[t];
      }
    });
  }
  auto trained_past = [&](uint64_t n) {
    return WaitUntil(
        [&] {
          return (steps[0].load() >= n && steps[1].load() >= n) ||
                 !failed[0].ok() || !failed[1].ok();
        },
        absl::Seconds(60));
  };
  ASSERT_TRUE(trained_past(10));
  std::vector<std::string> all;
  for (auto& shard : shards_) all.push_back(shard->address());
  std::unique_ptr<ServerProcess> grow =
      MoveBuckets({absl::StrCat("--to_shards=", absl::StrJoin(all, ",")),
                   "--buckets_per_step=256"},
                  "reshard");
  EXPECT_EQ(ExitCode(*grow), 0) << grow->log();
  EXPECT_THAT(grow->log(), HasSubstr("4 shards (1024, 1024, 1024, 1024"));
  const uint64_t grown_at = steps[0].load();
  ASSERT_TRUE(trained_past(grown_at + 10));
  const std::vector<std::string> all_four = all;
  all.pop_back();
  std::unique_ptr<ServerProcess> shrink =
      MoveBuckets({absl::StrCat("--to_shards=", absl::StrJoin(all, ",")),
                   "--buckets_per_step=256"},
                  "reshard");
  EXPECT_EQ(ExitCode(*shrink), 0) << shrink->log();
  EXPECT_THAT(shrink->log(), HasSubstr("3 shards (1366, 1365, 1365"));
  // The removed shard applies nothing more; training goes on without it.
  const uint64_t removed_keys = KeysPushedOn(3);
  ASSERT_TRUE(trained_past(steps[0].load() + 10));
  stop = true;
  for (std::thread& trainer : trainers) trainer.join();
  ASSERT_THAT(failed[0], IsOk());
  ASSERT_THAT(failed[1], IsOk());
  EXPECT_EQ(KeysPushedOn(3), removed_keys);

  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  EXPECT_EQ(cluster_->num_shards(), 3u);
  ExpectClusterEqualsReference(2 * kKeySpace);
  ExpectServingFollowsTheThreeShards(serving.address());
  // Once it is stopped, a client that still routes to it (here one started
  // with the four addresses) gets its rows from the others: its pull asks
  // them for a newer map after a second without an answer.
  ASSERT_THAT(shards_[3]->Kill9(), IsOk());
  std::unique_ptr<PsClient> stale = MakeClient(all_four);
  EXPECT_EQ(PullAll(*stale, 2 * kKeySpace), PullAll(*local_, 2 * kKeySpace));
  // A shard restarts with the new count only (its data directory has it).
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  absl::StatusOr<testing::ProcessExit> refused = shards_[1]->RunUntilExit();
  ASSERT_THAT(refused, IsOk());
  EXPECT_EQ(refused->exit_code, 2) << shards_[1]->log();
  EXPECT_THAT(shards_[1]->log(), HasSubstr("3"));
  // As if it had stopped between keeping the 3-shard map and recording the
  // count: the restart with the map's count finishes the change.
  const std::string placement = shards_[1]->data_dir() + "/SHARD_PLACEMENT";
  std::string recorded = testing::ReadFileOrEmpty(placement);
  ASSERT_THAT(recorded, HasSubstr("num_shards=3\n"));
  recorded.replace(recorded.find("num_shards=3"), 12, "num_shards=4");
  ASSERT_THAT(FileSystem::Default()->WriteFileAtomically(placement, recorded),
              IsOk());
  ServerProcessOptions now;
  now.data_dir = shards_[1]->data_dir();
  now.flags = {"--num_shards=3", "--shard_index=1"};
  ServerProcess restarted(now);
  ASSERT_THAT(restarted.Start(), IsOk());
  EXPECT_THAT(testing::ReadFileOrEmpty(placement), HasSubstr("num_shards=3\n"));
}

class BucketMoveKillTest : public BucketMoveTest,
                           public ::testing::WithParamInterface<int> {};

TEST_P(BucketMoveKillTest,
       AKillMidCopyLeavesTheSourceServingAndTheMoveResumes) {
  for (uint64_t step = 0; step < 40; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  const uint64_t target_rows = RowsOn(1);
  // Throttled, so that the copy is still going when the victim dies.
  std::unique_ptr<ServerProcess> move =
      MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1024",
                   "--buckets_per_step=1024", "--max_rows_per_second=800"});
  ASSERT_TRUE(WaitUntil([&] { return RowsOn(1) > target_rows + 200; },
                        absl::Seconds(60)));
  ServerProcess& victim = *shards_[GetParam()];
  ASSERT_THAT(victim.Kill9(), IsOk());
  EXPECT_EQ(ExitCode(*move), 1) << move->log();
  EXPECT_THAT(move->log(), HasSubstr("run the command again"));
  ASSERT_THAT(victim.StartOnSamePort(), IsOk());

  // The source still owns the buckets; nothing acknowledged was lost.
  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  EXPECT_EQ(cluster_->shard_map()->version(), 1u);
  EXPECT_EQ(PullAll(*cluster_), PullAll(*local_));
  for (uint64_t step = 40; step < 45; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  EXPECT_EQ(PullAll(*cluster_), PullAll(*local_));
  // A killed target keeps its partial copy until the move runs again; a
  // checkpoint taken meanwhile still reshards to what clients read.
  ExpectReshardedCheckpointEqualsReference(GetParam() == 1);

  // Run again, it finishes; training after it matches too.
  std::unique_ptr<ServerProcess> again =
      MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1024",
                   "--buckets_per_step=1024"});
  EXPECT_EQ(ExitCode(*again), 0) << again->log();
  for (uint64_t step = 45; step < 50; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  EXPECT_EQ(cluster_->shard_map()->BucketsOf(1).size(), 2048u + 1024);
  ExpectClusterEqualsReference();
}

// Two replicated shards (two replicas each, etcd): a move's rows reach the
// target's follower and the source's drop reaches the source's follower,
// through each group's log, so followers promoted after the move serve what
// their primaries served.
class ReplicatedBucketMoveTest : public BucketMoveTest {
 protected:
  void SetUp() override {
    ASSERT_THAT(etcd_.Start(), IsOk());
    for (uint32_t s = 0; s < 2; ++s) {
      StartGroup(s, 2, {0, 0});
      ASSERT_GE(testing::WaitForPrimaryOf(groups_[s]), 0);
      addresses_.push_back(GroupAddress(s));
    }
    StartReferenceAndClients();
  }

  // Shard `s` of `num_shards`: two replicas on `ports` (0: any free one).
  void StartGroup(uint32_t s, uint32_t num_shards, std::vector<int> ports) {
    for (int r = 0; r < 2; ++r) {
      ServerProcessOptions options;
      options.flags =
          testing::ReplicaFlags(etcd_.endpoint(), r, 2, "move-replicated");
      options.flags.push_back(absl::StrCat("--num_shards=", num_shards));
      options.flags.push_back(absl::StrCat("--shard_index=", s));
      options.port = ports[r];
      groups_[s].push_back(std::make_unique<ServerProcess>(options));
      ASSERT_THAT(groups_[s].back()->Start(), IsOk());
    }
  }

  std::string GroupAddress(uint32_t s) const {
    std::vector<std::string> replicas;
    for (const auto& replica : groups_[s]) {
      replicas.push_back(replica->address());
    }
    return absl::StrJoin(replicas, "|");
  }

  // The rows shard `s`'s primary holds.
  uint64_t GroupRows(uint32_t s) { return RowsAt(GroupAddress(s)); }

  testing::EtcdProcess etcd_;
  std::vector<std::unique_ptr<ServerProcess>> groups_[3];
};

TEST_F(ReplicatedBucketMoveTest, PromotedFollowersServeTheMovedRows) {
  Trainer trainer(*this, 300);
  ASSERT_TRUE(trainer.WaitForSteps(20));
  std::unique_ptr<ServerProcess> move =
      MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1024",
                   "--buckets_per_step=512"});
  EXPECT_EQ(ExitCode(*move), 0) << move->log();
  EXPECT_THAT(move->log(), HasSubstr("moved 1024 buckets"));
  ASSERT_TRUE(trainer.WaitForSteps(trainer.steps() + 10));
  ASSERT_THAT(trainer.Stop(), IsOk());
  ExpectClusterEqualsReference();
  const uint64_t rows = Rows(*cluster_);
  ASSERT_GT(rows, 0u);

  // Each group's follower has every entry; then both primaries die.
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(testing::WaitForReplicasToConverge(groups_[s]));
  }
  for (int s = 0; s < 2; ++s) {
    std::vector<std::unique_ptr<ServerProcess>>& group = groups_[s];
    const int primary = testing::PrimaryOf(group);
    ASSERT_GE(primary, 0);
    ASSERT_THAT(group[primary]->Kill9(), IsOk());
    ASSERT_GE(testing::WaitForPrimaryOf(group), 0);
  }
  std::unique_ptr<PsClient> promoted = MakeClient(addresses_);
  ASSERT_NE(promoted, nullptr);
  // The target's new primary has the moved rows (a follower that missed
  // them would answer the initializer's values); the source's holds none
  // of the buckets it gave away (the count would exceed the reference's).
  EXPECT_EQ(PullAll(*promoted), PullAll(*local_));
  EXPECT_EQ(Rows(*promoted), rows);
  ASSERT_THAT(promoted->RefreshShardMap(), IsOk());
  EXPECT_EQ(promoted->shard_map()->BucketsOf(1).size(), 2048u + 1024);
}

TEST_F(ReplicatedBucketMoveTest, GrowsByAReplicatedShardWhileTraining) {
  // A serving PS given the two groups finds the third in the map.
  ServerProcessOptions serving_options;
  serving_options.binary = "strata-serving";
  serving_options.flags = {
      absl::StrCat("--shards=", addresses_[0], ",", addresses_[1]),
      "--shard_map_check_s=0.2", "--unknown_keys=initializer"};
  ServerProcess serving(serving_options);
  ASSERT_THAT(serving.Start(), IsOk());
  Trainer trainer(*this, 300);
  ASSERT_TRUE(trainer.WaitForSteps(10));
  // As docs/MULTI_MACHINE.md says for a cluster in etcd: the first run puts
  // the grown map in etcd and names the shard that is missing; the new
  // group, started then with the new count, reads that map; the second run
  // moves the buckets.
  const std::vector<int> ports = {testing::PickFreePort(),
                                  testing::PickFreePort()};
  const std::string third =
      absl::StrCat("127.0.0.1:", ports[0], "|127.0.0.1:", ports[1]);
  const std::string grown = absl::StrCat("--to_shards=", addresses_[0], ",",
                                         addresses_[1], ",", third);
  std::unique_ptr<ServerProcess> first = MoveBuckets({grown}, "reshard");
  EXPECT_EQ(ExitCode(*first), 1) << first->log();
  EXPECT_THAT(first->log(), HasSubstr("start every new shard"));
  StartGroup(2, 3, ports);
  ASSERT_GE(testing::WaitForPrimaryOf(groups_[2]), 0);
  ASSERT_EQ(GroupAddress(2), third);
  std::unique_ptr<ServerProcess> again = MoveBuckets({grown}, "reshard");
  EXPECT_EQ(ExitCode(*again), 0) << again->log();
  EXPECT_THAT(again->log(), HasSubstr("3 shards (1366, 1365, 1365"));
  ASSERT_TRUE(trainer.WaitForSteps(trainer.steps() + 10));
  ASSERT_THAT(trainer.Stop(), IsOk());
  // The cluster's client, given two shards, reached the third through the
  // map; every push applied exactly once.
  ExpectClusterEqualsReference();
  EXPECT_EQ(cluster_->num_shards(), 3u);
  // The new shard's follower has what its primary got.
  ASSERT_TRUE(testing::WaitForReplicasToConverge(groups_[2]));
  ExpectServingFollowsTheThreeShards(serving.address());
}

class ReplicatedBucketMoveKillTest : public ReplicatedBucketMoveTest,
                                     public ::testing::WithParamInterface<int> {
};

// The primary of the source's or the target's group killed mid-copy. The
// source's voids the move (its tracking lived in the dead primary's
// memory): the step fails. The target's ends the step if a call was in
// flight; between two calls it goes unnoticed, since the next call finds
// the promoted follower, which has every block acknowledged before. Either
// way the killed replica rejoins, nothing acknowledged is lost, and the
// move ends done, by the command run again if it failed.
TEST_P(ReplicatedBucketMoveKillTest,
       APrimaryKilledMidCopyLosesNothingAndTheMoveEnds) {
  for (uint64_t step = 0; step < 30; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  const uint64_t target_rows = GroupRows(1);
  std::unique_ptr<ServerProcess> move =
      MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1024",
                   "--buckets_per_step=1024", "--max_rows_per_second=800"});
  ASSERT_TRUE(WaitUntil([&] { return GroupRows(1) > target_rows + 200; },
                        absl::Seconds(60)));
  std::vector<std::unique_ptr<ServerProcess>>& group = groups_[GetParam()];
  const int primary = testing::PrimaryOf(group);
  ASSERT_GE(primary, 0);
  ASSERT_THAT(group[primary]->Kill9(), IsOk());
  const int exit_code = ExitCode(*move);
  if (GetParam() == 0) {
    EXPECT_EQ(exit_code, 1) << move->log();
  }
  ASSERT_TRUE(exit_code == 0 || exit_code == 1) << move->log();
  ASSERT_THAT(group[primary]->StartOnSamePort(), IsOk());
  ASSERT_GE(testing::WaitForPrimaryOf(group), 0);
  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  if (exit_code == 1) {
    EXPECT_THAT(move->log(), HasSubstr("run the command again"));
    EXPECT_EQ(cluster_->shard_map()->version(), 1u);
  }
  EXPECT_EQ(PullAll(*cluster_), PullAll(*local_));
  for (uint64_t step = 30; step < 35; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  if (exit_code == 1) {
    std::unique_ptr<ServerProcess> again =
        MoveBuckets({"--to_shard=1", "--from_shard=0", "--count=1024",
                     "--buckets_per_step=1024"});
    EXPECT_EQ(ExitCode(*again), 0) << again->log();
  }
  for (uint64_t step = 35; step < 40; ++step) {
    ASSERT_THAT(PushStep(step, 1000), IsOk());
  }
  ASSERT_THAT(cluster_->RefreshShardMap(), IsOk());
  EXPECT_EQ(cluster_->shard_map()->BucketsOf(1).size(), 2048u + 1024);
  ExpectClusterEqualsReference();
  for (int s = 0; s < 2; ++s) {
    EXPECT_TRUE(testing::WaitForReplicasToConverge(groups_[s])) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(SourceOrTarget, ReplicatedBucketMoveKillTest,
                         ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? "Source" : "Target";
                         });

INSTANTIATE_TEST_SUITE_P(SourceOrTarget, BucketMoveKillTest,
                         ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? "Source" : "Target";
                         });

}  // namespace
}  // namespace strata
