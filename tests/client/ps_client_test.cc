// PsClient against two real strata-server processes on loopback.

#include "client/ps_client.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/shard_client.h"
#include "common/fp16.h"
#include "embedding/embedding_table.h"
#include "embedding/initializer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "server/table_config_proto.h"
#include "tests/testing/forwarding_shard_client.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 8;

v1::TableConfig UniformSgdTable(const std::string& name) {
  v1::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.set_seed(42);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-0.5f);
  config.mutable_initializer()->set_max(0.5f);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

// The rows a server holds for `table` after `pushes`, each a (keys,
// gradients) pair whose duplicate keys were summed in order, as PsClient
// does.
std::vector<float> ReferenceRows(
    const v1::TableConfig& table,
    const std::vector<std::pair<std::vector<uint64_t>, std::vector<float>>>&
        pushes,
    const std::vector<uint64_t>& keys) {
  absl::StatusOr<EmbeddingTableConfig> config = TableConfigFromProto(table);
  EXPECT_THAT(config, IsOk());
  EmbeddingTable reference(*config, 1);
  const uint32_t dim = config->dim;
  for (const auto& [push_keys, gradients] : pushes) {
    std::vector<uint64_t> unique;
    std::vector<float> summed;
    for (size_t i = 0; i < push_keys.size(); ++i) {
      auto it = std::find(unique.begin(), unique.end(), push_keys[i]);
      const size_t u = it - unique.begin();
      if (it == unique.end()) {
        unique.push_back(push_keys[i]);
        summed.resize(summed.size() + dim, 0.0f);
      }
      for (uint32_t d = 0; d < dim; ++d) {
        summed[u * dim + d] += gradients[i * dim + d];
      }
    }
    reference.ApplyGradients(unique, summed.data(), false, nullptr);
  }
  std::vector<float> rows(keys.size() * dim);
  reference.Lookup(keys, rows.data());
  return rows;
}

// A real clock that counts the client's retry backoffs.
class BackoffCountingClock : public Clock {
 public:
  absl::Time Now() override { return Clock::Real()->Now(); }
  void SleepFor(absl::Duration duration) override {
    {
      absl::MutexLock lock(&mu_);
      ++sleeps_;
    }
    Clock::Real()->SleepFor(duration);
  }
  bool WaitForSleeps(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return sleeps_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  absl::Mutex mu_;
  int sleeps_ ABSL_GUARDED_BY(mu_) = 0;
};

// Forwards every call to a real shard client, except that the first push is
// delivered and then answered CANCELLED, as a shard that shuts down while
// holding the call does after applying it.
class CancelsFirstPushAfterApplying : public testing::ForwardingShardClient {
 public:
  explicit CancelsFirstPushAfterApplying(std::unique_ptr<ShardClient> real)
      : ForwardingShardClient(std::move(real)) {}
  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration deadline, Done done) override {
    if (cancelled_.exchange(true)) {
      target().PushAsync(request, response, deadline, std::move(done));
      return;
    }
    target().PushAsync(request, response, deadline,
                       [done = std::move(done)](absl::Status status) {
                         EXPECT_THAT(status, IsOk());
                         done(absl::CancelledError("server shutting down"));
                       });
  }

 private:
  std::atomic<bool> cancelled_{false};
};

class PsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int shard = 0; shard < 2; ++shard) {
      ServerProcessOptions options;
      options.flags = {"--num_shards=2", absl::StrCat("--shard_index=", shard),
                       "--durability=group"};
      shards_.push_back(std::make_unique<ServerProcess>(options));
      ASSERT_THAT(shards_.back()->Start(), IsOk());
    }
    client_ = MakeClient(PsClientOptions());
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<PsClient> MakeClient(PsClientOptions options) {
    options.shard_addresses = {shards_[0]->address(), shards_[1]->address()};
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Keys 1..n, in which both shards own some (checked).
  std::vector<uint64_t> Keys(size_t n, const std::string& table) {
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = i + 1;
    int on_shard1 = 0;
    for (uint64_t key : keys) on_shard1 += client_->ShardOf(table, key);
    EXPECT_GT(on_shard1, 0);
    EXPECT_LT(on_shard1, static_cast<int>(n));
    return keys;
  }

  std::vector<std::unique_ptr<ServerProcess>> shards_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(PsClientTest, PullOfFreshKeysEqualsTheInitializer) {
  v1::TableConfig uniform = UniformSgdTable("uniform");
  v1::TableConfig normal = UniformSgdTable("normal");
  normal.set_seed(9);
  normal.mutable_initializer()->set_type(v1::TRUNCATED_NORMAL);
  normal.mutable_initializer()->set_mean(0.1f);
  normal.mutable_initializer()->set_stddev(0.2f);
  ASSERT_THAT(client_->CreateTable(uniform), IsOk());
  ASSERT_THAT(client_->CreateTable(normal), IsOk());

  std::vector<uint64_t> keys = Keys(100, "uniform");
  keys.push_back(uint64_t{1} << 40);
  keys.push_back(~uint64_t{0});
  InitializerConfig uniform_init;
  uniform_init.type = InitializerType::kUniform;
  uniform_init.min = -0.5f;
  uniform_init.max = 0.5f;
  InitializerConfig normal_init;
  normal_init.type = InitializerType::kTruncatedNormal;
  normal_init.mean = 0.1f;
  normal_init.stddev = 0.2f;
  for (const auto& [table, init] :
       {std::make_pair(uniform, Initializer(uniform_init, 42)),
        std::make_pair(normal, Initializer(normal_init, 9))}) {
    std::vector<float> rows(keys.size() * kDim);
    ASSERT_THAT(client_->Pull(table.name(), keys, absl::MakeSpan(rows)),
                IsOk());
    std::vector<float> expected(keys.size() * kDim);
    for (size_t i = 0; i < keys.size(); ++i) {
      init.Fill(keys[i], kDim, expected.data() + i * kDim);
    }
    EXPECT_THAT(rows, ElementsAreArray(expected)) << table.name();
  }
}

TEST_F(PsClientTest, PushSumsTheGradientsOfDuplicateKeys) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  std::vector<uint64_t> keys = Keys(20, "t");
  // Every key three times, in a scrambled order.
  std::vector<uint64_t> pushed;
  for (int copy = 0; copy < 3; ++copy) {
    pushed.insert(pushed.end(), keys.begin(), keys.end());
  }
  std::shuffle(pushed.begin(), pushed.end(), std::mt19937(1));
  std::vector<float> gradients(pushed.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) {
    gradients[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
  }
  ASSERT_THAT(client_->Push("t", pushed, gradients), IsOk());

  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(client_->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(
                        ReferenceRows(table, {{pushed, gradients}}, keys)));
}

TEST_F(PsClientTest, PullAnswersInTheCallersKeyOrder) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  const std::vector<uint64_t> keys = Keys(40, "t");
  std::vector<float> gradients(keys.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) {
    gradients[i] = static_cast<float>(i) * 0.125f;
  }
  ASSERT_THAT(client_->Push("t", keys, gradients), IsOk());

  // Reversed, with repeats, trained and fresh keys mixed.
  std::vector<uint64_t> order(keys.rbegin(), keys.rend());
  order.insert(order.begin() + 5, keys[3]);
  order.push_back(keys[3]);
  order.push_back(100000);
  order.insert(order.begin(), 100001);
  std::vector<float> rows(order.size() * kDim);
  ASSERT_THAT(client_->Pull("t", order, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(
      rows, ElementsAreArray(ReferenceRows(table, {{keys, gradients}}, order)));
}

TEST_F(PsClientTest, DistinctKeyCallsMatchTheDeduplicatingOnes) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  // Distinct keys of both shards in a scrambled order, half of them pushed
  // by PushDistinct and half by Push.
  std::vector<uint64_t> keys = Keys(60, "t");
  std::shuffle(keys.begin(), keys.end(), std::mt19937(3));
  const std::vector<uint64_t> first(keys.begin(), keys.begin() + 30);
  const std::vector<uint64_t> second(keys.begin() + 30, keys.end());
  std::vector<float> gradients(first.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) {
    gradients[i] = 0.02f * static_cast<float>(i % 31) - 0.25f;
  }
  ASSERT_THAT(client_->PushDistinct("t", first, gradients, /*global_step=*/1),
              IsOk());
  ASSERT_THAT(client_->Push("t", second, gradients), IsOk());

  std::vector<uint64_t> order = keys;
  order.push_back(100000);  // never pushed
  std::vector<float> distinct(order.size() * kDim);
  std::vector<float> deduplicated(order.size() * kDim);
  ASSERT_THAT(client_->PullDistinct("t", order, absl::MakeSpan(distinct)),
              IsOk());
  ASSERT_THAT(client_->Pull("t", order, absl::MakeSpan(deduplicated)), IsOk());
  EXPECT_THAT(distinct,
              ElementsAreArray(ReferenceRows(
                  table, {{first, gradients}, {second, gradients}}, order)));
  EXPECT_EQ(distinct, deduplicated);
}

TEST_F(PsClientTest, KeysAreSpreadOverBothShards) {
  ASSERT_THAT(client_->CreateTable(UniformSgdTable("t")), IsOk());
  const std::vector<uint64_t> keys = Keys(200, "t");
  ASSERT_THAT(
      client_->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.5f)),
      IsOk());
  uint64_t owned[2] = {0, 0};
  for (uint64_t key : keys) ++owned[client_->ShardOf("t", key)];

  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<v1::StatsResponse> stats,
                              client_->Stats());
  ASSERT_EQ(stats.size(), 2u);
  for (uint32_t shard = 0; shard < 2; ++shard) {
    EXPECT_EQ(stats[shard].shard_index(), shard);
    EXPECT_EQ(stats[shard].num_shards(), 2u);
    EXPECT_GT(stats[shard].keys_pushed(), 0u) << "shard " << shard;
    EXPECT_EQ(stats[shard].keys_pushed(), owned[shard]) << "shard " << shard;
    ASSERT_EQ(stats[shard].tables_size(), 1);
    EXPECT_EQ(stats[shard].tables(0).num_rows(), owned[shard]);
  }
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<v1::TableInfo> tables,
                              client_->ListTables());
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].num_rows(), keys.size());
}

TEST_F(PsClientTest, UnknownTableErrorNamesTheTable) {
  std::vector<float> rows(2 * kDim);
  const std::vector<uint64_t> keys = {1, 2};
  EXPECT_THAT(client_->Pull("no_such_table", keys, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no_such_table"), HasSubstr("shard "))));
  EXPECT_THAT(
      client_->Push("no_such_table", keys, rows),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_table")));
}

TEST_F(PsClientTest, Fp16ClientPullsRoundedRowsAndPushesGradients) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  PsClientOptions options;
  options.encoding = WireEncoding::kFloat16;
  std::unique_ptr<PsClient> fp16 = MakeClient(options);
  ASSERT_NE(fp16, nullptr);
  const std::vector<uint64_t> keys = Keys(30, "t");

  std::vector<float> full(keys.size() * kDim), half(keys.size() * kDim);
  ASSERT_THAT(client_->Pull("t", keys, absl::MakeSpan(full)), IsOk());
  ASSERT_THAT(fp16->Pull("t", keys, absl::MakeSpan(half)), IsOk());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(half[i], HalfToFloat(FloatToHalf(full[i]))) << i;
  }

  // fp16-exact gradients arrive unchanged.
  std::vector<float> gradients(keys.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) {
    gradients[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  }
  ASSERT_THAT(fp16->Push("t", keys, gradients), IsOk());
  ASSERT_THAT(client_->Pull("t", keys, absl::MakeSpan(full)), IsOk());
  EXPECT_THAT(
      full, ElementsAreArray(ReferenceRows(table, {{keys, gradients}}, keys)));
}

TEST_F(PsClientTest, PullFailsUnavailableNamingTheShardThatIsDown) {
  ASSERT_THAT(client_->CreateTable(UniformSgdTable("t")), IsOk());
  const std::vector<uint64_t> keys = Keys(20, "t");
  const std::string down = shards_[1]->address();
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());

  PsClientOptions options;
  options.retry_deadline = absl::Seconds(1);
  options.rpc_timeout = absl::Milliseconds(500);
  std::unique_ptr<PsClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  std::vector<float> rows(keys.size() * kDim);
  EXPECT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(down), HasSubstr("gave up"))));

  // Keys of the shard that is up are still served.
  std::vector<uint64_t> alive;
  for (uint64_t key : keys) {
    if (client->ShardOf("t", key) == 0) alive.push_back(key);
  }
  ASSERT_FALSE(alive.empty());
  std::vector<float> alive_rows(alive.size() * kDim);
  EXPECT_THAT(client->Pull("t", alive, absl::MakeSpan(alive_rows)), IsOk());
}

TEST_F(PsClientTest, BufferOfAnotherDimensionIsInvalidArgument) {
  ASSERT_THAT(client_->CreateTable(UniformSgdTable("t")), IsOk());
  const std::vector<uint64_t> keys = Keys(10, "t");
  // Room for rows of dimension 4; the table's rows have 8.
  std::vector<float> rows(keys.size() * 4);
  EXPECT_THAT(
      client_->Pull("t", keys, absl::MakeSpan(rows)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimension 4")));
  EXPECT_THAT(
      client_->Push("t", keys, rows),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimension 8")));
  std::vector<float> ragged(keys.size() * kDim + 1);
  EXPECT_THAT(client_->Pull("t", keys, absl::MakeSpan(ragged)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("whole number of rows")));
  EXPECT_THAT(client_->Pull("t", {}, absl::MakeSpan(ragged)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A worker that restarts with the client_id it is configured with starts its
// sequence numbers at 1 again. Fails today: the shards still hold the old
// incarnation's window, take the new pushes for retries of the old ones,
// acknowledge them as duplicates and drop them, and PsClient reports
// success.
TEST_F(PsClientTest, PushesOfARestartedClientWithTheSameIdAreApplied) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  const std::vector<uint64_t> keys = Keys(10, "t");
  const std::vector<float> first(keys.size() * kDim, 0.5f);
  const std::vector<float> second(keys.size() * kDim, 0.25f);
  PsClientOptions options;
  options.client_id = "worker-3";
  {
    std::unique_ptr<PsClient> before = MakeClient(options);
    ASSERT_NE(before, nullptr);
    ASSERT_THAT(before->Push("t", keys, first), IsOk());
  }
  std::unique_ptr<PsClient> after = MakeClient(options);
  ASSERT_NE(after, nullptr);
  ASSERT_THAT(after->Push("t", keys, second), IsOk());

  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<v1::StatsResponse> stats,
                              client_->Stats());
  EXPECT_EQ(stats[0].duplicate_pushes() + stats[1].duplicate_pushes(), 0u)
      << "the restarted client's push was taken for a retry and dropped";
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(client_->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(ReferenceRows(
                        table, {{keys, first}, {keys, second}}, keys)));
}

// PsClientOptions::retry_deadline is how long a call retries UNAVAILABLE
// shards. Fails today: FanOut gives up as soon as the next backoff would end
// past the deadline (here after 50+100+200+400 ms = 0.75 s of 1 s), so up to
// max_backoff of the retry window is never tried.
TEST_F(PsClientTest, PullRetriesUntilTheRetryDeadline) {
  ASSERT_THAT(client_->CreateTable(UniformSgdTable("t")), IsOk());
  const std::vector<uint64_t> keys = Keys(20, "t");
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());

  PsClientOptions options;
  options.retry_deadline = absl::Seconds(1);
  options.rpc_timeout = absl::Milliseconds(500);
  std::unique_ptr<PsClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  std::vector<float> rows(keys.size() * kDim);
  const absl::Time start = absl::Now();
  EXPECT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kUnavailable));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, options.retry_deadline) << "gave up before the deadline";
  EXPECT_LT(took, absl::Seconds(5)) << "retried far past the deadline";
}

TEST_F(PsClientTest, PushRetriedAcrossAShardRestartIsAppliedOnce) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  const std::vector<uint64_t> keys = Keys(20, "t");
  const std::vector<float> first(keys.size() * kDim, 0.5f);
  ASSERT_THAT(client_->Push("t", keys, first), IsOk());
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());

  BackoffCountingClock clock;
  PsClientOptions options;
  options.clock = &clock;
  options.retry_deadline = absl::Seconds(30);
  options.rpc_timeout = absl::Seconds(5);
  std::unique_ptr<PsClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  const std::vector<float> second(keys.size() * kDim, 0.25f);
  absl::Status pushed = absl::UnknownError("push did not return");
  std::thread pusher([&] { pushed = client->Push("t", keys, second); });
  // Restart only once the client has been refused and is backing off. The
  // restart happens on this thread: see ServerProcess on PR_SET_PDEATHSIG.
  const bool retrying = clock.WaitForSleeps(2, absl::Seconds(20));
  EXPECT_TRUE(retrying) << "the client never retried";
  ASSERT_THAT(shards_[1]->StartOnSamePort(), IsOk());
  pusher.join();
  ASSERT_THAT(pushed, IsOk());

  // Shard 0 got the push once (it was not re-sent there), shard 1 kept the
  // first push through kill -9 (--durability=group) and got the second once.
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(rows, ElementsAreArray(ReferenceRows(
                        table, {{keys, first}, {keys, second}}, keys)));
}

TEST_F(PsClientTest, CancelledPushIsRetriedAndAppliedOnce) {
  const v1::TableConfig table = UniformSgdTable("t");
  ASSERT_THAT(client_->CreateTable(table), IsOk());
  const std::vector<uint64_t> keys = Keys(20, "t");
  PsClientOptions options;
  options.shard_client_factory = [](const std::string& address) {
    return std::unique_ptr<ShardClient>(
        std::make_unique<CancelsFirstPushAfterApplying>(
            CreateGrpcShardClient(address, nullptr, "")));
  };
  std::unique_ptr<PsClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  const std::vector<float> gradients(keys.size() * kDim, 0.5f);
  ASSERT_THAT(client->Push("t", keys, gradients), IsOk());
  // Each shard applied the push, answered CANCELLED, got it again and
  // recognised it by its (client id, sequence): one application.
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT(client->Pull("t", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_THAT(
      rows, ElementsAreArray(ReferenceRows(table, {{keys, gradients}}, keys)));
}

}  // namespace
}  // namespace strata
