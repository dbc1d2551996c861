// What survives kill -9 of a strata-server in the middle of a stream of
// pushes, by durability mode, and whether deduplication survives with it.
//
// Push i (client "kill9", sequence i + 1) adds 1 to a counter row and 1 to
// its own row 1000000 + i (SGD, learning rate 1, zeros init, gradient -1),
// so the stored rows tell exactly which pushes were applied, and how often.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ProcessExit;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;

constexpr char kTable[] = "counters";
constexpr char kClientId[] = "kill9";
constexpr uint64_t kCounterKey = 7;
constexpr uint64_t kFirstPushKey = 1000000;
constexpr int kPushes = 400;
constexpr int kKillAfterAcks = 200;
constexpr int kPusherThreads = 4;
// In periodic mode pushes only touch memory and run much faster.
constexpr int kPeriodicPushes = 3000;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

// A raw stub, so that the test sets client_id and sequence itself.
class Shard {
 public:
  explicit Shard(const std::string& address)
      : stub_(v1::ParameterServer::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}

  absl::Status CreateTable() {
    v1::CreateTableRequest request;
    v1::TableConfig* config = request.mutable_config();
    config->set_name(kTable);
    config->set_dim(1);
    config->mutable_initializer()->set_type(v1::ZEROS);
    config->mutable_optimizer()->set_type(v1::SGD);
    config->mutable_optimizer()->set_learning_rate(1.0f);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateTableResponse response;
    return FromGrpcStatus(stub_->CreateTable(&context, request, &response));
  }

  // Push i; sets *duplicate to the server's answer.
  absl::Status Push(int i, bool* duplicate = nullptr) {
    v1::PushRequest request;
    request.set_client_id(kClientId);
    request.set_sequence(static_cast<uint64_t>(i) + 1);
    v1::TableBatch* batch = request.add_batches();
    batch->set_table(kTable);
    batch->add_keys(kCounterKey);
    batch->add_keys(kFirstPushKey + i);
    batch->add_values(-1.0f);
    batch->add_values(-1.0f);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::PushResponse response;
    absl::Status status =
        FromGrpcStatus(stub_->Push(&context, request, &response));
    if (duplicate != nullptr) *duplicate = response.duplicate();
    return status;
  }

  // The counter, then the row of each of `pushes` pushes.
  absl::StatusOr<std::vector<float>> PullAll(int pushes) {
    v1::PullRequest request;
    v1::TableBatch* batch = request.add_batches();
    batch->set_table(kTable);
    batch->add_keys(kCounterKey);
    for (int i = 0; i < pushes; ++i) batch->add_keys(kFirstPushKey + i);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::PullResponse response;
    absl::Status status =
        FromGrpcStatus(stub_->Pull(&context, request, &response));
    if (!status.ok()) return status;
    if (response.batches_size() != 1 ||
        response.batches(0).values_size() != pushes + 1) {
      return absl::InternalError("malformed pull answer");
    }
    return std::vector<float>(response.batches(0).values().begin(),
                              response.batches(0).values().end());
  }

 private:
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

// Pushes 0..pushes-1 from several threads until one fails (the server is
// gone), recording which were acknowledged.
class PushStream {
 public:
  PushStream(Shard& shard, int pushes)
      : shard_(shard), pushes_(pushes), acked_(pushes, false) {
    for (int t = 0; t < kPusherThreads; ++t) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  ~PushStream() { Join(); }

  // True once `n` pushes were acknowledged, false after `timeout`.
  bool WaitForAcks(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n] {
      mu_.AssertReaderHeld();
      return acks_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  void Join() {
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

  // REQUIRES: Join() returned.
  const std::vector<bool>& acked() const { return acked_; }
  int num_acked() {
    absl::MutexLock lock(&mu_);
    return acks_;
  }

 private:
  void Run() {
    while (!failed_) {
      const int i = next_.fetch_add(1);
      if (i >= pushes_) return;
      if (!shard_.Push(i).ok()) {
        failed_ = true;
        return;
      }
      absl::MutexLock lock(&mu_);
      acked_[i] = true;
      ++acks_;
    }
  }

  Shard& shard_;
  const int pushes_;
  std::atomic<int> next_{0};
  std::atomic<bool> failed_{false};
  absl::Mutex mu_;
  std::vector<bool> acked_;
  int acks_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

// Checks that the rows hold a whole number of applications of each push and
// that the counter agrees; returns which pushes were applied.
std::vector<bool> ExpectConsistent(const std::vector<float>& rows) {
  const int pushes = static_cast<int>(rows.size()) - 1;
  std::vector<bool> applied(pushes, false);
  int ones = 0;
  for (int i = 0; i < pushes; ++i) {
    const float value = rows[1 + i];
    EXPECT_TRUE(value == 0.0f || value == 1.0f)
        << "push " << i << " was applied " << value << " times";
    applied[i] = value == 1.0f;
    ones += applied[i];
  }
  EXPECT_EQ(rows[0], static_cast<float>(ones))
      << "the counter disagrees with the per-push rows";
  return applied;
}

// Retries every push in `which` with its own sequence number: each must be
// acknowledged, as a duplicate exactly when it had been applied; afterwards
// every push is applied exactly once.
void RetryAndExpectAllAppliedOnce(Shard& shard, const std::vector<bool>& which,
                                  const std::vector<bool>& applied) {
  const int pushes = static_cast<int>(which.size());
  int wrong = 0;
  for (int i = 0; i < pushes; ++i) {
    if (!which[i]) continue;
    bool duplicate = false;
    ASSERT_THAT(shard.Push(i, &duplicate), IsOk());
    if (duplicate != applied[i] && ++wrong <= 3) {
      ADD_FAILURE() << "retried push " << i << " (applied: " << applied[i]
                    << ") answered duplicate=" << duplicate;
    }
  }
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, shard.PullAll(pushes));
  EXPECT_EQ(rows[0], static_cast<float>(pushes));
  for (int i = 0; i < pushes; ++i) {
    if (rows[1 + i] != 1.0f && ++wrong <= 6) {
      ADD_FAILURE() << "push " << i << " applied " << rows[1 + i] << " times";
    }
  }
  EXPECT_EQ(wrong, 0);
}

// Bytes in the write-ahead logs of the store in `data_dir`. In periodic
// mode pushes write nothing, so growth means a flush wrote rows.
uint64_t WalBytes(const std::string& data_dir) {
  uint64_t bytes = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(data_dir + "/db", error)) {
    if (entry.path().extension() == ".log") {
      bytes += entry.file_size(error);
    }
  }
  return bytes;
}

class Kill9DurabilityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Kill9DurabilityTest, AcknowledgedPushesSurviveAndDedupSurvives) {
  ServerProcessOptions options;
  options.flags = {"--durability=" + GetParam()};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  std::vector<bool> acked;
  {
    Shard shard(server.address());
    ASSERT_THAT(shard.CreateTable(), IsOk());
    PushStream stream(shard, kPushes);
    ASSERT_TRUE(stream.WaitForAcks(kKillAfterAcks, absl::Seconds(30)))
        << "only " << stream.num_acked() << " pushes acknowledged";
    // Pushes are still in flight: kill without stopping the stream.
    ASSERT_THAT(server.Kill9(), IsOk());
    stream.Join();
    acked = stream.acked();
  }
  ASSERT_THAT(server.Start(), IsOk());
  Shard shard(server.address());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, shard.PullAll(kPushes));
  const std::vector<bool> applied = ExpectConsistent(rows);
  int lost = 0;
  for (int i = 0; i < kPushes; ++i) lost += acked[i] && !applied[i];
  EXPECT_EQ(lost, 0) << "acknowledged pushes lost by kill -9 with --durability="
                     << GetParam();

  // Retry the unacknowledged pushes (some were applied before the kill, some
  // not), then every push again: a client whose answers were lost retries
  // acknowledged pushes too, and the recovered windows must know them all.
  std::vector<bool> unacked(kPushes);
  for (int i = 0; i < kPushes; ++i) unacked[i] = !acked[i];
  RetryAndExpectAllAppliedOnce(shard, unacked, applied);
  RetryAndExpectAllAppliedOnce(shard, std::vector<bool>(kPushes, true),
                               std::vector<bool>(kPushes, true));
}

INSTANTIATE_TEST_SUITE_P(Modes, Kill9DurabilityTest,
                         ::testing::Values("sync", "group"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(PeriodicDurabilityTest, Kill9LeavesAConsistentCutWithItsDedupWindow) {
  ServerProcessOptions options;
  options.flags = {"--durability=periodic", "--flush_interval_ms=10"};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  {
    Shard shard(server.address());
    ASSERT_THAT(shard.CreateTable(), IsOk());
    const uint64_t wal_before = WalBytes(server.data_dir());
    PushStream stream(shard, kPeriodicPushes);
    // Kill while pushes run, after a flush wrote some of them (so that the
    // cut is not empty) and with more acknowledged since.
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (WalBytes(server.data_dir()) == wal_before && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_GT(WalBytes(server.data_dir()), wal_before) << "no flush in 30 s";
    ASSERT_TRUE(
        stream.WaitForAcks(std::min(stream.num_acked() + 100, kPeriodicPushes),
                           absl::Seconds(30)));
    ASSERT_THAT(server.Kill9(), IsOk());
  }
  ASSERT_THAT(server.Start(), IsOk());
  Shard shard(server.address());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows,
                              shard.PullAll(kPeriodicPushes));
  // Any number of the last pushes may be lost, but never half of one, and
  // the stored dedup window matches the stored rows: retrying every push
  // applies exactly the lost ones.
  const std::vector<bool> applied = ExpectConsistent(rows);
  EXPECT_GT(rows[0], 0.0f) << "the flush before the kill was lost";
  RetryAndExpectAllAppliedOnce(shard, std::vector<bool>(kPeriodicPushes, true),
                               applied);
}

TEST(PeriodicDurabilityTest, SigtermKeepsEveryAcknowledgedPush) {
  ServerProcessOptions options;
  // Longer than the test: only the final flush at SIGTERM writes the rows.
  options.flags = {"--durability=periodic", "--flush_interval_ms=600000"};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  {
    Shard shard(server.address());
    ASSERT_THAT(shard.CreateTable(), IsOk());
    for (int i = 0; i < kPushes; ++i) ASSERT_THAT(shard.Push(i), IsOk()) << i;
  }
  STRATA_ASSERT_OK_AND_ASSIGN(ProcessExit exit, server.Terminate());
  ASSERT_EQ(exit.exit_code, 0) << server.log();
  ASSERT_THAT(server.Start(), IsOk());
  Shard shard(server.address());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, shard.PullAll(kPushes));
  EXPECT_EQ(rows[0], static_cast<float>(kPushes));
  for (int i = 0; i < kPushes; ++i) EXPECT_EQ(rows[1 + i], 1.0f) << i;
  // And the dedup windows were flushed with them.
  bool duplicate = false;
  ASSERT_THAT(shard.Push(kPushes - 1, &duplicate), IsOk());
  EXPECT_TRUE(duplicate);
}

}  // namespace
}  // namespace strata
