// PsClient's pulls answered in shared memory by a real strata-server process
// on loopback: the same rows as over gRPC, and gRPC whenever the shared
// memory cannot be used.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/shard_client.h"
#include "common/pull_wire.h"
#include "common/shared_memory.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "proto/strata.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::MetricsPort;
using ::strata::testing::SampleValue;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StrataBinDir;
using ::strata::testing::WaitUntil;
using ::testing::ElementsAreArray;

constexpr uint32_t kDim = 8;
constexpr char kShared[] = "strata_server_shared_memory_answers_total";
constexpr char kRefused[] = "strata_server_shared_memory_refusals_total";
constexpr char kMemories[] = "strata_server_shared_memories";

v1::TableConfig AdagradTable() {
  v1::TableConfig config;
  config.set_name("t");
  config.set_dim(kDim);
  config.set_seed(7);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-0.5f);
  config.mutable_initializer()->set_max(0.5f);
  config.mutable_optimizer()->set_type(v1::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  return config;
}

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i * 7919 + 3;
  return keys;
}

class SharedMemoryPullTest : public ::testing::Test {
 protected:
  void StartShard(std::vector<std::string> flags = {}) {
    flags.push_back("--metrics_port=0");
    ServerProcessOptions options;
    options.flags = flags;
    shard_ = std::make_unique<ServerProcess>(options);
    ASSERT_THAT(shard_->Start(), IsOk());
    ASSERT_TRUE(IsLoopbackAddress(shard_->address())) << shard_->address();
    grpc_only_ = Client(/*shared=*/false);
    ASSERT_NE(grpc_only_, nullptr);
    ASSERT_THAT(grpc_only_->CreateTable(AdagradTable()), IsOk());
    // Rows that moved from their initial values.
    const std::vector<uint64_t> keys = Keys(2000);
    std::vector<float> gradients(keys.size() * kDim);
    for (size_t i = 0; i < gradients.size(); ++i) {
      gradients[i] = static_cast<float>(i % 13) * 0.01f - 0.05f;
    }
    ASSERT_THAT(grpc_only_->Push("t", keys, gradients), IsOk());
  }

  std::unique_ptr<PsClient> Client(bool shared, size_t slots = 8,
                                   size_t slot_bytes = size_t{8} << 20) {
    PsClientOptions options;
    options.shard_addresses = {shard_->address()};
    options.shared_memory_pull.enabled = shared;
    options.shared_memory_pull.slots = slots;
    options.shared_memory_pull.slot_bytes = slot_bytes;
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::vector<float> PullOverGrpc(const std::vector<uint64_t>& keys) {
    std::vector<float> rows(keys.size() * kDim);
    EXPECT_THAT(grpc_only_->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
    return rows;
  }

  double Metric(const char* name) {
    absl::StatusOr<int> port = MetricsPort(*shard_);
    EXPECT_THAT(port, IsOk());
    if (!port.ok()) return -1;
    absl::StatusOr<std::string> text = HttpGet(*port, "/metrics");
    EXPECT_THAT(text, IsOk());
    if (!text.ok()) return -1;
    absl::StatusOr<double> value = SampleValue(*text, name);
    return value.ok() ? *value : -1;
  }

  std::unique_ptr<ServerProcess> shard_;
  std::unique_ptr<PsClient> grpc_only_;
};

TEST_F(SharedMemoryPullTest, AnswersInSharedMemoryHoldTheRowsGrpcAnswers) {
  StartShard();
  std::unique_ptr<PsClient> client = Client(/*shared=*/true);
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> keys = Keys(2500);  // 500 never pushed.
  const std::vector<float> expected = PullOverGrpc(keys);
  EXPECT_EQ(Metric(kShared), 0);
  for (int pull = 0; pull < 3; ++pull) {
    std::vector<float> rows(keys.size() * kDim, -99.0f);
    ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
    EXPECT_THAT(rows, ElementsAreArray(expected)) << "pull " << pull;
  }
  EXPECT_EQ(Metric(kShared), 3);
  EXPECT_EQ(Metric(kRefused), 0);
}

TEST_F(SharedMemoryPullTest, ShardWithSharedAnswersOffRefusesOnceAnswersAll) {
  StartShard({"--shared_memory_answers=false"});
  std::unique_ptr<PsClient> client = Client(/*shared=*/true);
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> keys = Keys(300);
  const std::vector<float> expected = PullOverGrpc(keys);
  for (int pull = 0; pull < 5; ++pull) {
    std::vector<float> rows(keys.size() * kDim);
    ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
    EXPECT_THAT(rows, ElementsAreArray(expected)) << "pull " << pull;
  }
  // The client stopped offering its memory after the first refusal.
  EXPECT_EQ(Metric(kRefused), 1);
  EXPECT_EQ(Metric(kShared), 0);
}

TEST_F(SharedMemoryPullTest, AnswersLargerThanASlotGoOverGrpc) {
  StartShard();
  std::unique_ptr<PsClient> client =
      Client(/*shared=*/true, /*slots=*/2, /*slot_bytes=*/4096);
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> many = Keys(1000);  // 32 KB of values.
  const std::vector<uint64_t> few(many.begin(), many.begin() + 10);
  std::vector<float> rows(many.size() * kDim);
  ASSERT_THAT(client->Pull("t", many, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(PullOverGrpc(many)));
  EXPECT_EQ(Metric(kShared), 0);
  rows.resize(few.size() * kDim);
  ASSERT_THAT(client->Pull("t", few, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(PullOverGrpc(few)));
  EXPECT_EQ(Metric(kShared), 1);
  EXPECT_EQ(Metric(kRefused), 0);
}

// With one slot and eight threads most pulls find it taken: they go over
// gRPC, and every answer is still the right one.
TEST_F(SharedMemoryPullTest, PullsBeyondTheSlotsGoOverGrpc) {
  StartShard();
  std::unique_ptr<PsClient> client = Client(/*shared=*/true, /*slots=*/1);
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> all = Keys(2000);
  const std::vector<float> expected = PullOverGrpc(all);
  std::atomic<int> wrong{0}, failed{0};
  constexpr int kThreads = 8, kPulls = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const size_t begin = static_cast<size_t>(t) * 200;
      const std::vector<uint64_t> keys(all.begin() + begin,
                                       all.begin() + begin + 200);
      for (int pull = 0; pull < kPulls; ++pull) {
        std::vector<float> rows(keys.size() * kDim);
        if (!client->Pull("t", keys, absl::MakeSpan(rows)).ok()) {
          ++failed;
          continue;
        }
        if (!std::equal(rows.begin(), rows.end(),
                        expected.begin() + begin * kDim)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const double shared = Metric(kShared);
  EXPECT_GE(shared, 1);
  EXPECT_LE(shared, kThreads * kPulls);
  EXPECT_EQ(Metric(kRefused), 0);
}

// After kill -9 the restarted shard maps the client's memory again on the
// next pull.
TEST_F(SharedMemoryPullTest, ARestartedShardMapsTheMemoryAgain) {
  StartShard({"--durability=sync"});
  std::unique_ptr<PsClient> client = Client(/*shared=*/true);
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> keys = Keys(1000);
  const std::vector<float> expected = PullOverGrpc(keys);
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  ASSERT_EQ(Metric(kShared), 1);
  ASSERT_THAT(shard_->Kill9(), IsOk());
  ASSERT_THAT(shard_->StartOnSamePort(), IsOk());
  std::fill(rows.begin(), rows.end(), 0.0f);
  ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(expected));
  EXPECT_EQ(Metric(kShared), 1);  // The new process's count.
}

// A shard that maps one client's memory at most: a second client is
// answered over gRPC while the first lives, and in shared memory once the
// first is gone (its memory unmapped).
TEST_F(SharedMemoryPullTest, AClosedClientsMemoryMakesRoomForAnother) {
  StartShard({"--max_shared_memories=1"});
  const std::vector<uint64_t> keys = Keys(500);
  const std::vector<float> expected = PullOverGrpc(keys);
  std::vector<float> rows(keys.size() * kDim);
  std::unique_ptr<PsClient> first = Client(/*shared=*/true);
  ASSERT_NE(first, nullptr);
  ASSERT_THAT(first->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  std::unique_ptr<PsClient> second = Client(/*shared=*/true);
  ASSERT_NE(second, nullptr);
  ASSERT_THAT(second->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(expected));
  EXPECT_EQ(Metric(kShared), 1);
  EXPECT_EQ(Metric(kRefused), 1);
  first.reset();
  std::unique_ptr<PsClient> third = Client(/*shared=*/true);
  ASSERT_NE(third, nullptr);
  std::fill(rows.begin(), rows.end(), 0.0f);
  ASSERT_THAT(third->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(expected));
  EXPECT_EQ(Metric(kShared), 2);
}

// What the shard does with a region's claim word (SharedAnswerClaim): it
// writes only into a region still offered under the request's claim, marks
// it written, and answers over gRPC when the client gave the pull up.
TEST_F(SharedMemoryPullTest, TheShardWritesOnlyARegionStillOfferedToIt) {
  StartShard();
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
      SharedMemory::Create(4096 + 65536);
  ASSERT_THAT(memory, IsOk());
  uint8_t* const region = (*memory)->data() + 4096;
  const std::string token = "sixteen-byte-tok";
  std::memcpy((*memory)->data(), token.data(), token.size());
  auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(
      shard_->address(), grpc::InsecureChannelCredentials()));
  const std::vector<uint64_t> keys = Keys(100);
  const std::vector<float> expected = PullOverGrpc(keys);
  auto pull = [&](uint64_t claim, uint64_t word) {
    StoreSharedAnswerClaim(region, word);
    v1::PullRequest request;
    v1::TableBatch& batch = *request.add_batches();
    batch.set_table("t");
    for (uint64_t key : keys) batch.add_keys(key);
    v1::SharedAnswer& shared = *request.mutable_shared_answer();
    shared.set_path((*memory)->path());
    shared.set_size((*memory)->size());
    shared.set_token(token);
    shared.set_offset(4096);
    shared.set_capacity(65536);
    shared.set_claim(claim);
    grpc::ClientContext context;
    v1::PullResponse response;
    EXPECT_TRUE(stub->Pull(&context, request, &response).ok());
    return response;
  };
  auto offered = [](uint64_t generation) {
    return SharedAnswerClaimWord(generation, SharedAnswerClaim::kOffered);
  };
  auto word = [](uint64_t generation, SharedAnswerClaim state) {
    return SharedAnswerClaimWord(generation, state);
  };
  // Given up before the shard saw it: answered over gRPC, region untouched.
  v1::PullResponse response =
      pull(offered(1), word(1, SharedAnswerClaim::kAbandoned));
  EXPECT_EQ(response.shared_answer_bytes(), 0u);
  ASSERT_EQ(response.batches_size(), 1);
  EXPECT_THAT(response.batches(0).values(), ElementsAreArray(expected));
  EXPECT_EQ(LoadSharedAnswerClaim(region),
            word(1, SharedAnswerClaim::kAbandoned));
  EXPECT_EQ(region[kSharedAnswerClaimBytes], 0) << "the shard wrote anyway";
  // Offered under another generation (a later pull's): the same.
  response = pull(offered(2), offered(3));
  EXPECT_EQ(response.shared_answer_bytes(), 0u);
  EXPECT_EQ(LoadSharedAnswerClaim(region), offered(3));
  EXPECT_EQ(region[kSharedAnswerClaimBytes], 0);
  // A request whose claim is not an offer.
  response = pull(word(4, SharedAnswerClaim::kWriting), offered(4));
  EXPECT_EQ(response.shared_answer_bytes(), 0u);
  // Still offered: written there, and marked written.
  response = pull(offered(5), offered(5));
  EXPECT_GT(response.shared_answer_bytes(), 0u);
  EXPECT_EQ(response.batches_size(), 0);
  EXPECT_EQ(LoadSharedAnswerClaim(region),
            word(5, SharedAnswerClaim::kWritten));
  EXPECT_EQ(LoadSharedAnswerWriter(region),
            static_cast<uint64_t>(shard_->pid()));
  v1::PullResponse shared;
  ASSERT_TRUE(shared.ParseFromArray(region + kSharedAnswerClaimBytes,
                                    response.shared_answer_bytes()));
  ASSERT_EQ(shared.batches_size(), 1);
  EXPECT_THAT(shared.batches(0).values(), ElementsAreArray(expected));
  EXPECT_EQ(Metric(kShared), 1);
  EXPECT_EQ(Metric(kRefused), 0);
}

// Pulls that end at their deadline while the shard still writes their
// answer: the slot is not handed to the next pull until the shard is done,
// so every answer that arrives holds its own rows.
TEST_F(SharedMemoryPullTest, PullsGivenUpAtTheirDeadlineSpoilNoLaterAnswer) {
  StartShard();
  PsClientOptions options;
  options.shard_addresses = {shard_->address()};
  options.shared_memory_pull.slots = 2;
  options.rpc_timeout = absl::Milliseconds(5);
  options.retry_deadline = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client, IsOk());
  const std::vector<uint64_t> all = Keys(20000);
  const std::vector<float> expected = PullOverGrpc(all);
  std::atomic<int> answered{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // Each thread its own rows (160 KB to write), in the same layout: a
      // late write of one thread's answer over another's shows.
      const size_t count = all.size() / 4;
      const size_t begin = count * t;
      const std::vector<uint64_t> keys(all.begin() + begin,
                                       all.begin() + begin + count);
      std::vector<float> rows(count * kDim);
      for (int pull = 0; pull < 200; ++pull) {
        std::fill(rows.begin(), rows.end(), -1.0f);
        if (!(*client)->Pull("t", keys, absl::MakeSpan(rows)).ok()) continue;
        ++answered;
        if (!std::equal(rows.begin(), rows.end(),
                        expected.begin() + begin * kDim)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::printf("%d of 800 pulls answered in time, %.0f in shared memory\n",
              answered.load(), Metric(kShared));
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(answered.load(), 0);
}

// A client process killed with SIGKILL in the middle of its pulls: the
// shard goes on serving, and unmaps the dead client's memory when it needs
// the room.
TEST_F(SharedMemoryPullTest, AClientKilledMidPullLeavesTheShardServing) {
  StartShard({"--max_shared_memories=1"});
  const std::string bench = StrataBinDir() + "/strata-bench";
  const std::string shards = "--shards=" + shard_->address();
  std::vector<std::string> args = {
      bench,         "--mode=pull",  shards,
      "--table=t",   "--dim=8",      "--num_keys=2000",
      "--batch=500", "--inflight=4", "--duration_s=60",
      "--warmup_s=0"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  pid_t client = -1;
  ASSERT_EQ(posix_spawn(&client, bench.c_str(), &actions, nullptr, argv.data(),
                        environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_TRUE(
      WaitUntil([&] { return Metric(kShared) >= 20; }, absl::Seconds(30)))
      << "the killed client never pulled through shared memory";
  ASSERT_EQ(kill(client, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(client, &status, 0), client);
  EXPECT_EQ(Metric(kMemories), 1);

  std::unique_ptr<PsClient> next = Client(/*shared=*/true);
  ASSERT_NE(next, nullptr);
  const std::vector<uint64_t> keys = Keys(500);
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(next->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(PullOverGrpc(keys)));
  // Not refused, so mapped: the dead client's memory made room. (The count
  // of shared answers is no witness: the shard may still be answering
  // pulls the dead client sent.)
  EXPECT_EQ(Metric(kRefused), 0);
  EXPECT_EQ(Metric(kMemories), 1);
}

}  // namespace
}  // namespace strata
