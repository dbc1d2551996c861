// A replicated shard on loopback: a real etcd, three strata-server replicas
// of shard index 0 in `replicated` mode (W = 2), and a client pushing
// numbered updates through PsClient. The primary is killed with kill -9,
// then the new primary; then both come back. Every push must be
// acknowledged, and present exactly once on whichever replica ends up
// primary.
//
// Push i adds 1 to a counter row and 1 to its own row kFirstPushKey + i
// (SGD, learning rate 1, zeros init, gradient -1), so the rows tell which
// pushes were applied, and how often.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "coordination/etcd_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/http_get.h"
#include "tests/testing/replicas.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tcp_proxy.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::EtcdProcess;
using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::MetricsPort;
using ::strata::testing::ReplicaFlags;
using ::strata::testing::ReplicaPosition;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::TcpProxy;
using ::strata::testing::WaitForPrimaryOf;
using ::strata::testing::WaitForReplicasToConverge;
using ::strata::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr char kTable[] = "counters";
constexpr uint64_t kCounterKey = 7;
constexpr uint64_t kFirstPushKey = 1000000;
constexpr int kReplicas = 3;
constexpr int kPushes = 600;

class ReplicationFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_THAT(etcd_.Start(), IsOk()); }

  // Each replica reaches etcd through its own proxy when `through_proxies`,
  // so that a test can cut one off.
  void StartReplicas(bool through_proxies) {
    for (int r = 0; r < kReplicas; ++r) {
      std::string endpoint = etcd_.endpoint();
      if (through_proxies) {
        proxies_.push_back(std::make_unique<TcpProxy>(
            "127.0.0.1", std::stoi(endpoint.substr(endpoint.rfind(':') + 1))));
        ASSERT_THAT(proxies_.back()->Start(), IsOk());
        endpoint = proxies_.back()->address();
      }
      ServerProcessOptions options;
      options.flags = ReplicaFlags(endpoint, r, kReplicas, "failover-test");
      replicas_.push_back(std::make_unique<ServerProcess>(options));
      ASSERT_THAT(replicas_.back()->Start(), IsOk());
    }
  }

  int WaitForPrimary() { return WaitForPrimaryOf(replicas_); }

  std::string GroupAddress() {
    std::vector<std::string> addresses;
    for (const auto& replica : replicas_) {
      addresses.push_back(replica->address());
    }
    return absl::StrJoin(addresses, "|");
  }

  v1::TableConfig CounterTable() {
    v1::TableConfig config;
    config.set_name(kTable);
    config.set_dim(1);
    config.mutable_initializer()->set_type(v1::ZEROS);
    config.mutable_optimizer()->set_type(v1::SGD);
    config.mutable_optimizer()->set_learning_rate(1.0f);
    return config;
  }

  EtcdProcess etcd_;
  std::vector<std::unique_ptr<TcpProxy>> proxies_;
  std::vector<std::unique_ptr<ServerProcess>> replicas_;
};

TEST_F(ReplicationFailoverTest, KilledPrimariesLoseNoAcknowledgedPush) {
  StartReplicas(/*through_proxies=*/false);
  const int first = WaitForPrimary();
  ASSERT_GE(first, 0) << "no replica became primary";
  PsClientOptions options;
  options.shard_addresses = {GroupAddress()};
  options.retry_deadline = absl::Seconds(60);
  options.rpc_timeout = absl::Seconds(5);
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client.status(), IsOk());
  ASSERT_THAT((*client)->CreateTable(CounterTable()), IsOk());
  // The serving PS follows the group's change stream across the failovers.
  ServerProcessOptions serving_options;
  serving_options.binary = "strata-serving";
  serving_options.flags = {absl::StrCat("--shards=", GroupAddress()),
                           "--metrics_port=0"};
  ServerProcess serving(serving_options);
  ASSERT_THAT(serving.Start(), IsOk());

  std::atomic<int> acknowledged{0};
  absl::Status push_error;
  std::vector<absl::Duration> stalls;
  std::thread pusher([&] {
    for (int i = 0; i < kPushes; ++i) {
      const std::vector<uint64_t> keys = {kCounterKey, kFirstPushKey + i};
      const std::vector<float> gradients = {-1.0f, -1.0f};
      const absl::Time start = absl::Now();
      absl::Status s = (*client)->Push(kTable, keys, gradients);
      if (!s.ok()) {
        push_error = s;
        return;
      }
      stalls.push_back(absl::Now() - start);
      acknowledged.fetch_add(1);
    }
  });
  auto wait_for_acks = [&](int count) {
    return WaitUntil([&] { return acknowledged.load() >= count; },
                     absl::Seconds(90), absl::Milliseconds(10));
  };

  ASSERT_TRUE(wait_for_acks(kPushes / 4));
  ASSERT_THAT(replicas_[first]->Kill9(), IsOk());
  const int second = WaitForPrimary();
  ASSERT_GE(second, 0) << "no follower took over from r" << first;
  ASSERT_NE(second, first);

  ASSERT_TRUE(wait_for_acks(kPushes / 2));
  ASSERT_THAT(replicas_[second]->Kill9(), IsOk());
  // One replica of three is left: it cannot know it has every
  // acknowledged push, so it must not take over alone. Bring the others
  // back (same ports, so the client's list still holds).
  ASSERT_THAT(replicas_[first]->StartOnSamePort(), IsOk());
  ASSERT_THAT(replicas_[second]->StartOnSamePort(), IsOk());

  pusher.join();
  ASSERT_THAT(push_error, IsOk());
  ASSERT_EQ(acknowledged.load(), kPushes);
  absl::Duration longest;
  for (absl::Duration stall : stalls) longest = std::max(longest, stall);
  std::cout << "longest push across the failovers: "
            << absl::FormatDuration(longest) << std::endl;

  // Every replica ends at the same position.
  ASSERT_TRUE(WaitForReplicasToConverge(replicas_));

  // The serving PS ends with the same rows: every push once.
  ServingClientOptions serving_client_options;
  serving_client_options.endpoints = {serving.address()};
  absl::StatusOr<std::unique_ptr<ServingClient>> serving_client =
      ServingClient::Create(serving_client_options);
  ASSERT_THAT(serving_client.status(), IsOk());
  std::vector<uint64_t> served_keys = {kCounterKey};
  for (int i = 0; i < kPushes; ++i) served_keys.push_back(kFirstPushKey + i);
  std::vector<float> served(served_keys.size());
  EXPECT_TRUE(WaitUntil(
      [&] {
        uint32_t missing = 0;
        if (!(*serving_client)
                 ->Lookup(kTable, served_keys, absl::MakeSpan(served), &missing)
                 .ok() ||
            missing > 0 || served[0] != static_cast<float>(kPushes)) {
          return false;
        }
        for (size_t k = 1; k < served.size(); ++k) {
          if (served[k] != 1.0f) return false;
        }
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(100)))
      << "serving counter " << served[0];

  // The serving PS shows the group as its primary describes it: the last
  // primary, followers caught up, and the stream on that primary after at
  // least two moves (two primaries were killed under it).
  const int final_primary = WaitForPrimary();
  ASSERT_GE(final_primary, 0);
  const std::string final_id = absl::StrCat("r", final_primary);
  v1::FollowedShard followed;
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<v1::ServingStatusResponse> status =
            (*serving_client)->Status();
        if (!status.ok() || status->shards_size() != 1) return false;
        followed = status->shards(0);
        const v1::ReplicaGroupInfo& group = followed.replica_group();
        if (!group.primary() || group.replica_id() != final_id ||
            group.followers_size() != kReplicas - 1) {
          return false;
        }
        for (const v1::FollowerInfo& follower : group.followers()) {
          if (follower.acknowledged_sequence() != group.position_sequence()) {
            return false;
          }
        }
        return followed.streaming_from() == replicas_[final_primary]->address();
      },
      absl::Seconds(30), absl::Milliseconds(100)))
      << followed.DebugString();
  EXPECT_GE(followed.replica_switches(), 2u);
  absl::StatusOr<int> metrics_port = MetricsPort(serving);
  ASSERT_THAT(metrics_port, IsOk());
  absl::StatusOr<std::string> page = HttpGet(*metrics_port, "/status");
  ASSERT_THAT(page, IsOk());
  EXPECT_THAT(*page, HasSubstr(absl::StrCat("<td class=\"primary\">", final_id,
                                            "</td>")));
  absl::StatusOr<std::string> metrics = HttpGet(*metrics_port, "/metrics");
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(*metrics,
              HasSubstr(absl::StrCat("strata_serving_shard_primary_term{shard="
                                     "\"0\"} ",
                                     followed.replica_group().term(), "\n")));
  EXPECT_THAT(*metrics,
              HasSubstr("strata_serving_shard_replica_lag{shard=\"0\""));

  // The rows, read from two primaries in turn (the last one is stopped so
  // that a follower's copy is read too).
  std::vector<uint64_t> keys = {kCounterKey};
  for (int i = 0; i < kPushes; ++i) keys.push_back(kFirstPushKey + i);
  for (int round = 0; round < 2; ++round) {
    std::vector<float> rows(keys.size());
    ASSERT_THAT((*client)->Pull(kTable, keys, absl::MakeSpan(rows)), IsOk());
    EXPECT_EQ(rows[0], static_cast<float>(kPushes)) << "round " << round;
    int wrong = 0;
    for (int i = 0; i < kPushes; ++i) {
      if (rows[1 + i] != 1.0f) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "pushes not applied exactly once, round " << round;
    if (round == 0) {
      const int last = WaitForPrimary();
      ASSERT_GE(last, 0);
      ASSERT_THAT(replicas_[last]->Terminate().status(), IsOk());
    }
  }
}

// A checkpoint is taken on the primary; restoring it replaces the rows of
// every replica, so a failover after the restore keeps the restored rows.
TEST_F(ReplicationFailoverTest, RestoreReachesEveryReplica) {
  StartReplicas(/*through_proxies=*/false);
  ASSERT_GE(WaitForPrimary(), 0);
  PsClientOptions options;
  options.shard_addresses = {GroupAddress()};
  options.retry_deadline = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client.status(), IsOk());
  ASSERT_THAT((*client)->CreateTable(CounterTable()), IsOk());
  const std::vector<uint64_t> key = {kCounterKey};
  const std::vector<float> minus_one = {-1.0f};
  auto push_times = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_THAT((*client)->Push(kTable, key, minus_one), IsOk());
    }
  };
  auto counter = [&] {
    std::vector<float> row(1);
    EXPECT_THAT((*client)->Pull(kTable, key, absl::MakeSpan(row)), IsOk());
    return row[0];
  };
  push_times(10);
  ASSERT_THAT((*client)->Checkpoint("at-10", 10).status(), IsOk());
  push_times(5);
  ASSERT_EQ(counter(), 15.0f);
  ASSERT_THAT((*client)->Restore("at-10").status(), IsOk());
  EXPECT_EQ(counter(), 10.0f);
  push_times(1);
  // Every follower gets the restored rows (a snapshot) and the push after.
  ASSERT_TRUE(WaitForReplicasToConverge(replicas_));
  const int primary = WaitForPrimary();
  ASSERT_GE(primary, 0);
  ASSERT_THAT(replicas_[primary]->Kill9(), IsOk());
  const int next = WaitForPrimary();
  ASSERT_GE(next, 0);
  EXPECT_EQ(counter(), 11.0f) << "after the failover to r" << next;
}

// The primary loses etcd (its proxy is cut) while a client keeps pushing to
// it directly. It must stop acknowledging before its lease can have expired,
// a follower must take over, and every push it acknowledged must be on the
// new primary, once.
TEST_F(ReplicationFailoverTest, PrimaryCutOffFromEtcdStopsAcknowledging) {
  StartReplicas(/*through_proxies=*/true);
  const int old_primary = WaitForPrimary();
  ASSERT_GE(old_primary, 0);
  PsClientOptions direct_options;
  direct_options.shard_addresses = {replicas_[old_primary]->address()};
  direct_options.retry_deadline = absl::ZeroDuration();  // one attempt each
  direct_options.rpc_timeout = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<PsClient>> direct =
      PsClient::Create(direct_options);
  ASSERT_THAT(direct.status(), IsOk());
  ASSERT_THAT((*direct)->CreateTable(CounterTable()), IsOk());

  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::vector<int> acked_pushes;
  absl::Time last_ack;
  std::thread pusher([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::vector<uint64_t> keys = {kCounterKey, kFirstPushKey + i};
      const std::vector<float> gradients = {-1.0f, -1.0f};
      if ((*direct)->Push(kTable, keys, gradients).ok()) {
        acked_pushes.push_back(i);
        last_ack = absl::Now();
        acked.fetch_add(1);
      } else {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
  });
  ASSERT_TRUE(WaitUntil([&] { return acked.load() >= 100; }, absl::Seconds(60),
                        absl::Milliseconds(10)));
  const absl::Time cut = absl::Now();
  proxies_[old_primary]->Cut();
  int new_primary = -1;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int r = 0; r < kReplicas; ++r) {
          if (r != old_primary &&
              ReplicaPosition(replicas_[r]->address()).role() == "primary") {
            new_primary = r;
            return true;
          }
        }
        return false;
      },
      absl::Seconds(30), absl::Milliseconds(20)));
  const absl::Time took_over = absl::Now();
  // Pushes to the old primary go on failing after the takeover.
  absl::SleepFor(absl::Milliseconds(500));
  stop.store(true);
  pusher.join();
  std::cout << "cut at 0, last acknowledgement of the old primary at "
            << absl::FormatDuration(last_ack - cut) << ", new primary seen at "
            << absl::FormatDuration(took_over - cut) << std::endl;
  // Lease TTL 1 s: the old primary decides its last acknowledgement by
  // 0.8 s after its last renewal before the cut; seen by this client after
  // the answer's trip (slow under sanitizers), so with some slack.
  EXPECT_LT(last_ack - cut, absl::Milliseconds(1500));
  EXPECT_LT(last_ack, took_over);

  PsClientOptions group_options;
  group_options.shard_addresses = {GroupAddress()};
  group_options.retry_deadline = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<PsClient>> group =
      PsClient::Create(group_options);
  ASSERT_THAT(group.status(), IsOk());
  std::vector<uint64_t> keys;
  for (int i : acked_pushes) keys.push_back(kFirstPushKey + i);
  std::vector<float> rows(keys.size());
  ASSERT_THAT((*group)->Pull(kTable, keys, absl::MakeSpan(rows)), IsOk());
  int wrong = 0;
  for (float row : rows) {
    if (row != 1.0f) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "acknowledged pushes missing or applied twice";

  // Back on etcd, the old primary learns it was replaced and follows.
  proxies_[old_primary]->Restore();
  EXPECT_TRUE(WaitUntil(
      [&] {
        const v1::GetPositionResponse old_one =
            ReplicaPosition(replicas_[old_primary]->address());
        const v1::GetPositionResponse primary =
            ReplicaPosition(replicas_[new_primary]->address());
        return old_one.role() == "follower" &&
               old_one.position().term() == primary.position().term() &&
               old_one.position().sequence() == primary.position().sequence();
      },
      absl::Seconds(30), absl::Milliseconds(50)));
  // It refuses writes, naming the new primary.
  absl::Status refused;
  EXPECT_TRUE(WaitUntil(
      [&] {
        refused = (*direct)->Push(kTable, keys, rows);
        return absl::IsFailedPrecondition(refused);
      },
      absl::Seconds(5), absl::Milliseconds(50)))
      << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr(replicas_[new_primary]->address()));
}

}  // namespace
}  // namespace strata
