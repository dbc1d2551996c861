// The versioned shard map end to end: real strata-server processes (static,
// and coordinated through a real etcd), PsClient and raw shard calls.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "client/ps_client.h"
#include "client/shard_client.h"
#include "common/file_system.h"
#include "common/hash.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/shard_map_proto.h"
#include "proto/strata.pb.h"
#include "server/shard_map_store.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/forwarding_shard_client.h"
#include "tests/testing/replicas.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::EtcdProcess;
using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 4;
constexpr char kTable[] = "moved";

v1::TableConfig SgdTable() {
  v1::TableConfig config;
  config.set_name(kTable);
  config.set_dim(kDim);
  config.set_seed(5);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-0.5f);
  config.mutable_initializer()->set_max(0.5f);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

// A pull of `keys` sent straight to one shard, routed by `version`.
absl::Status PullOn(ShardClient& shard, std::vector<uint64_t> keys,
                    uint64_t version) {
  v1::PullRequest request;
  request.set_shard_map_version(version);
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(keys.begin(), keys.end());
  grpc::ByteBuffer answer;
  absl::Status result;
  absl::Notification done;
  shard.PullAsync(request, &answer, absl::Seconds(10),
                  [&](absl::Status status) {
                    result = std::move(status);
                    done.Notify();
                  });
  done.WaitForNotification();
  return result;
}

// Forwards every call to a real shard client, except that its first push is
// applied, then `after_apply` runs (a test changes the shard map there), and
// the push is answered CANCELLED, as when its answer is lost.
class LosesFirstPushAnswer : public testing::ForwardingShardClient {
 public:
  LosesFirstPushAnswer(std::unique_ptr<ShardClient> real,
                       std::function<void()> after_apply)
      : ForwardingShardClient(std::move(real)),
        after_apply_(std::move(after_apply)) {}
  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration deadline, Done done) override {
    if (lost_) {
      target().PushAsync(request, response, deadline, std::move(done));
      return;
    }
    lost_ = true;
    absl::Notification applied;
    target().PushAsync(request, response, deadline, [&](absl::Status status) {
      EXPECT_THAT(status, IsOk());
      applied.Notify();
    });
    applied.WaitForNotification();
    after_apply_();
    done(absl::CancelledError("the answer was lost"));
  }

 private:
  std::function<void()> after_apply_;
  // Pushes to one shard are issued from one thread at a time here.
  bool lost_ = false;
};

// SetShardMap on one shard only; returns whether it changed its map.
absl::StatusOr<bool> SetMapOn(const std::string& address, const ShardMap& map) {
  std::unique_ptr<ShardClient> shard = CreateGrpcShardClient(address);
  v1::SetShardMapRequest request;
  *request.mutable_map() = ShardMapToProto(map);
  v1::SetShardMapResponse response;
  absl::Status status =
      shard->SetShardMap(request, &response, absl::Seconds(10));
  if (!status.ok()) return status;
  return response.changed();
}

class ShardMapRoutingTest : public ::testing::Test {
 protected:
  // Two static shards, or, with `etcd`, two shards keeping the map there.
  void StartShards(const std::string& etcd = "") {
    for (int shard = 0; shard < 2; ++shard) {
      ServerProcessOptions options;
      if (!etcd.empty()) {
        options.flags = testing::ReplicaFlags(etcd, 0, 1, "map-test");
      }
      options.flags.push_back("--num_shards=2");
      options.flags.push_back(absl::StrCat("--shard_index=", shard));
      shards_.push_back(std::make_unique<ServerProcess>(options));
      ASSERT_THAT(shards_.back()->Start(), IsOk());
    }
    admin_ = MakeClient();
    ASSERT_NE(admin_, nullptr);
    ASSERT_THAT(admin_->CreateTable(SgdTable()), IsOk());
  }

  std::unique_ptr<PsClient> MakeClient(PsClientOptions options = {}) {
    options.shard_addresses = {shards_[0]->address(), shards_[1]->address()};
    if (options.retry_deadline == PsClientOptions().retry_deadline) {
      options.retry_deadline = absl::Seconds(20);
    }
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Keys 1..n, and one of them whose bucket shard 1 owns under the first
  // map, with the map that gives that bucket to shard 0 (version 2).
  struct Move {
    std::vector<uint64_t> keys;
    uint64_t moved_key = 0;
    uint32_t bucket = 0;
    ShardMap map = ShardMap::Modulo(2);
  };
  Move PlanMove(size_t n) {
    Move move;
    for (uint64_t key = 1; key <= n; ++key) move.keys.push_back(key);
    const uint64_t table_hash = HashString(kTable);
    for (uint64_t key : move.keys) {
      if (move.map.OwnerOfKey(table_hash, key) == 1) {
        move.moved_key = key;
        break;
      }
    }
    EXPECT_NE(move.moved_key, 0u);
    move.bucket = BucketOf(table_hash, move.moved_key);
    absl::StatusOr<ShardMap> next = move.map.WithOwner(move.bucket, 0);
    EXPECT_THAT(next, IsOk());
    move.map = *next;
    return move;
  }

  std::vector<float> PullAll(PsClient& client,
                             const std::vector<uint64_t>& keys) {
    std::vector<float> rows(keys.size() * kDim);
    EXPECT_THAT(client.Pull(kTable, keys, absl::MakeSpan(rows)), IsOk());
    return rows;
  }

  std::vector<std::unique_ptr<ServerProcess>> shards_;
  std::unique_ptr<PsClient> admin_;
};

TEST_F(ShardMapRoutingTest, ClientsOfAnOldMapRerouteAndPushExactlyOnce) {
  StartShards();
  const Move move = PlanMove(40);
  // Rows of an untouched bucket: moving it needs no copy.
  const std::vector<float> initial = PullAll(*admin_, move.keys);
  std::unique_ptr<PsClient> stale_puller = MakeClient();
  std::unique_ptr<PsClient> stale_pusher = MakeClient();
  ASSERT_THAT(admin_->SetShardMap(move.map), IsOk());
  EXPECT_EQ(admin_->shard_map()->version(), 2u);
  EXPECT_EQ(stale_pusher->shard_map()->version(), 1u);

  // A pull by the old map: shard 1 refuses it, the client fetches version 2
  // and pulls again; the caller sees the rows only.
  EXPECT_EQ(PullAll(*stale_puller, move.keys), initial);
  EXPECT_EQ(stale_puller->shard_map()->version(), 2u);
  EXPECT_EQ(stale_puller->ShardOf(kTable, move.moved_key), 0u);

  // A push by the old map: shard 0 applies its part, shard 1 refuses its
  // part, whose keys go to their new owners under a new sequence. Every row
  // moves by exactly one gradient (lost: unchanged; twice: -2).
  const std::vector<float> ones(move.keys.size() * kDim, 1.0f);
  ASSERT_THAT(stale_pusher->Push(kTable, move.keys, ones), IsOk());
  EXPECT_EQ(stale_pusher->shard_map()->version(), 2u);
  const std::vector<float> after = PullAll(*admin_, move.keys);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i], initial[i] - 1.0f) << "key " << move.keys[i / kDim];
  }

  // The moved key's row now lives on shard 0; shard 1 refuses it with the
  // current version, whichever version the request names.
  std::unique_ptr<ShardClient> shard0 =
      CreateGrpcShardClient(shards_[0]->address());
  std::unique_ptr<ShardClient> shard1 =
      CreateGrpcShardClient(shards_[1]->address());
  EXPECT_THAT(PullOn(*shard0, {move.moved_key}, 2), IsOk());
  const absl::Status not_owned = PullOn(*shard1, {move.moved_key}, 2);
  EXPECT_THAT(not_owned,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(absl::StrCat("bucket ", move.bucket)),
                             HasSubstr("owned by shard 0"))));
  EXPECT_EQ(ShardMapVersionOf(not_owned), 2u);
  const absl::Status stale = PullOn(*shard1, {move.keys[0]}, 1);
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("routed by shard map version 1")));
  EXPECT_EQ(ShardMapVersionOf(stale), 2u);
  // A newer map than the shard knows of: served by its own (ownership
  // checked).
  std::vector<uint64_t> on_shard1;
  for (uint64_t key : move.keys) {
    if (move.map.OwnerOfKey(HashString(kTable), key) == 1) {
      on_shard1.push_back(key);
    }
  }
  EXPECT_THAT(PullOn(*shard1, on_shard1, 3), IsOk());
  // A key it gives away, by that newer version: it has not got the map
  // yet, so retry (refreshing would not help the client).
  EXPECT_THAT(PullOn(*shard1, {move.moved_key}, 3),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("version 3, which this shard has not got")));
  v1::StatsResponse stats;
  ASSERT_THAT(shard1->Stats(&stats, absl::Seconds(10)), IsOk());
  EXPECT_EQ(stats.shard_map_version(), 2u);
}

TEST_F(ShardMapRoutingTest,
       ARetryOfAPushAppliedBeforeTheMapChangedIsADuplicate) {
  StartShards();
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 40; ++key) keys.push_back(key);
  // A bucket of shard 1 that none of the keys is in: moving it needs no
  // rows copied, and the push's own keys keep their owners.
  const uint64_t table_hash = HashString(kTable);
  std::vector<bool> used(kNumBuckets, false);
  for (uint64_t key : keys) used[BucketOf(table_hash, key)] = true;
  uint32_t empty_bucket = 1;
  while (used[empty_bucket]) empty_bucket += 2;
  absl::StatusOr<ShardMap> next =
      ShardMap::Modulo(2).WithOwner(empty_bucket, 0);
  ASSERT_THAT(next, IsOk());
  const std::vector<float> initial = PullAll(*admin_, keys);

  // Shard 1 applies the push; the map changes; its answer is lost, and the
  // client retries the same request, routed by version 1.
  PsClientOptions options;
  const std::string lossy = shards_[1]->address();
  options.shard_client_factory = [&](const std::string& address) {
    std::unique_ptr<ShardClient> real = CreateGrpcShardClient(address);
    if (address != lossy) return real;
    return std::unique_ptr<ShardClient>(new LosesFirstPushAnswer(
        std::move(real),
        [&] { EXPECT_THAT(admin_->SetShardMap(*next), IsOk()); }));
  };
  std::unique_ptr<PsClient> client = MakeClient(options);
  const std::vector<float> ones(keys.size() * kDim, 1.0f);
  ASSERT_THAT(client->Push(kTable, keys, ones), IsOk());

  // Refusing the retry for the old map would have made the client send
  // shard 1's keys again under a new sequence: applied twice.
  const std::vector<float> after = PullAll(*admin_, keys);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i], initial[i] - 1.0f) << "key " << keys[i / kDim];
  }
  std::unique_ptr<ShardClient> shard1 = CreateGrpcShardClient(lossy);
  v1::StatsResponse stats;
  ASSERT_THAT(shard1->Stats(&stats, absl::Seconds(10)), IsOk());
  EXPECT_EQ(stats.duplicate_pushes(), 1u);
}

TEST_F(ShardMapRoutingTest, AShardThatIsDownDoesNotHoldUpARerouteWithoutIt) {
  StartShards();
  // Keys shard 1 owns under both maps, and a bucket of shard 1 none of them
  // is in, given to shard 0 (on shard 1 only: shard 0 goes down).
  const uint64_t table_hash = HashString(kTable);
  const ShardMap first = ShardMap::Modulo(2);
  std::vector<uint64_t> keys;
  std::vector<bool> used(kNumBuckets, false);
  for (uint64_t key = 1; keys.size() < 20; ++key) {
    if (first.OwnerOfKey(table_hash, key) != 1) continue;
    keys.push_back(key);
    used[BucketOf(table_hash, key)] = true;
  }
  uint32_t empty_bucket = 1;
  while (used[empty_bucket]) empty_bucket += 2;
  absl::StatusOr<ShardMap> next = first.WithOwner(empty_bucket, 0);
  ASSERT_THAT(next, IsOk());
  PsClientOptions options;
  options.retry_deadline = absl::Seconds(3);
  std::unique_ptr<PsClient> stale = MakeClient(options);
  const std::vector<float> initial = PullAll(*stale, keys);

  ASSERT_THAT(SetMapOn(shards_[1]->address(), *next),
              ::strata::testing::IsOkAndHolds(true));
  ASSERT_THAT(shards_[0]->Kill9(), IsOk());
  // Shard 1 refuses the pull for version 1; the client asks it (not the
  // shard that is down) for the map and pulls again.
  EXPECT_EQ(PullAll(*stale, keys), initial);
  EXPECT_EQ(stale->shard_map()->version(), 2u);
}

TEST_F(ShardMapRoutingTest, AShardKeepsItsMapAcrossARestartAndChecksChanges) {
  StartShards();
  const Move move = PlanMove(40);
  ASSERT_THAT(admin_->SetShardMap(move.map), IsOk());
  std::unique_ptr<ShardClient> shard1 =
      CreateGrpcShardClient(shards_[1]->address());
  v1::SetShardMapRequest request;
  v1::SetShardMapResponse response;
  // The same map again changes nothing; an older one is refused.
  *request.mutable_map() = ShardMapToProto(move.map);
  ASSERT_THAT(shard1->SetShardMap(request, &response, absl::Seconds(10)),
              IsOk());
  EXPECT_FALSE(response.changed());
  *request.mutable_map() = ShardMapToProto(ShardMap::Modulo(2));
  EXPECT_THAT(shard1->SetShardMap(request, &response, absl::Seconds(10)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("version 1, not above")));
  // A map that leaves this shard out, or a malformed one.
  absl::StatusOr<ShardMap> one_shard =
      ShardMap::Create(3, 1, std::vector<uint32_t>(kNumBuckets, 0));
  ASSERT_THAT(one_shard, IsOk());
  *request.mutable_map() = ShardMapToProto(*one_shard);
  EXPECT_THAT(shard1->SetShardMap(request, &response, absl::Seconds(10)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has 1 shards, which leaves out this shard "
                                 "1")));
  request.mutable_map()->mutable_bucket_owners()->RemoveLast();
  EXPECT_THAT(shard1->SetShardMap(request, &response, absl::Seconds(10)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4095 bucket owners")));

  // Killed and restarted: it serves the map it kept.
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  ASSERT_THAT(shards_[1]->StartOnSamePort(), IsOk());
  shard1 = CreateGrpcShardClient(shards_[1]->address());
  v1::ShardMap kept;
  ASSERT_THAT(shard1->GetShardMap(&kept, absl::Seconds(10)), IsOk());
  EXPECT_THAT(ShardMapFromProto(kept),
              ::strata::testing::IsOkAndHolds(move.map));

  // Started with another shard count on the same data: refused, naming both.
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  ServerProcessOptions wrong;
  wrong.data_dir = shards_[1]->data_dir();
  wrong.flags = {"--num_shards=3", "--shard_index=1"};
  ServerProcess restarted(wrong);
  EXPECT_FALSE(restarted.Start().ok());
  EXPECT_THAT(restarted.log(), AllOf(HasSubstr("of 2"), HasSubstr("of 3")));
}

// Empty buckets of shard 1 under the first map (none of `keys` is in them),
// the first `count` found.
std::vector<uint32_t> EmptyBucketsOfShard1(const std::vector<uint64_t>& keys,
                                           size_t count) {
  std::vector<bool> used(kNumBuckets, false);
  for (uint64_t key : keys) used[BucketOf(HashString(kTable), key)] = true;
  std::vector<uint32_t> empty;
  for (uint32_t b = 1; b < kNumBuckets && empty.size() < count; b += 2) {
    if (!used[b]) empty.push_back(b);
  }
  return empty;
}

TEST_F(ShardMapRoutingTest, ACheckpointKeepsItsMapForRestoreAndReshard) {
  StartShards();
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 40; ++key) keys.push_back(key);
  const std::vector<uint32_t> empty = EmptyBucketsOfShard1(keys, 2);
  ASSERT_EQ(empty.size(), 2u);
  // Version 2 gives the first empty bucket to shard 0, before any row is in
  // it; then a key of that bucket gets a row there.
  absl::StatusOr<ShardMap> v2 = ShardMap::Modulo(2).WithOwner(empty[0], 0);
  ASSERT_THAT(v2, IsOk());
  ASSERT_THAT(admin_->SetShardMap(*v2), IsOk());
  uint64_t moved_key = 1000;
  while (BucketOf(HashString(kTable), moved_key) != empty[0]) ++moved_key;
  keys.push_back(moved_key);
  const std::vector<float> ones(keys.size() * kDim, 1.0f);
  ASSERT_THAT(admin_->Push(kTable, keys, ones), IsOk());
  ASSERT_THAT(admin_->Checkpoint("c1", 5), IsOk());
  const std::vector<float> at_checkpoint = PullAll(*admin_, keys);
  for (const auto& shard : shards_) {
    EXPECT_THAT(
        ReadCheckpointShardMap(*FileSystem::Default(), shard->data_dir(), "c1"),
        ::strata::testing::IsOkAndHolds(*v2));
  }

  // Restored under the same map: as it was.
  ASSERT_THAT(admin_->Push(kTable, keys, ones), IsOk());
  ASSERT_THAT(admin_->Restore("c1"), IsOk());
  EXPECT_EQ(PullAll(*admin_, keys), at_checkpoint);
  // Under a map that places buckets otherwise: refused, naming both.
  absl::StatusOr<ShardMap> v3 = v2->WithOwner(empty[1], 0);
  ASSERT_THAT(v3, IsOk());
  ASSERT_THAT(admin_->SetShardMap(*v3), IsOk());
  EXPECT_THAT(admin_->Restore("c1").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("taken under shard map version 2"),
                             HasSubstr("version 3"))));

  // Resharded onto 3 new shards by the map it was taken under (by the first
  // map, the moved key's row would be on the wrong shard: refused).
  std::vector<std::string> sources = {shards_[0]->data_dir(),
                                      shards_[1]->data_dir()};
  for (auto& shard : shards_) ASSERT_THAT(shard->Kill9(), IsOk());
  testing::TempDir new_dirs("map_reshard");
  std::vector<std::string> targets;
  for (int t = 0; t < 3; ++t) {
    targets.push_back(absl::StrCat(new_dirs.path(), "/shard", t));
  }
  ServerProcessOptions tool;
  tool.binary = "stratactl";
  tool.daemon_flags = false;
  tool.flags = {"reshard-checkpoint", "c1",
                absl::StrCat("--from=", absl::StrJoin(sources, ",")),
                absl::StrCat("--to=", absl::StrJoin(targets, ","))};
  ServerProcess reshard(tool);
  ASSERT_THAT(reshard.Launch(), IsOk());
  absl::StatusOr<testing::ProcessExit> resharded =
      reshard.Wait(absl::Seconds(60));
  ASSERT_THAT(resharded, IsOk());
  ASSERT_EQ(resharded->exit_code, 0) << reshard.log();
  std::vector<std::unique_ptr<ServerProcess>> grown;
  PsClientOptions options;
  for (int t = 0; t < 3; ++t) {
    ServerProcessOptions shard;
    shard.data_dir = targets[t];
    shard.flags = {"--num_shards=3", absl::StrCat("--shard_index=", t)};
    grown.push_back(std::make_unique<ServerProcess>(shard));
    ASSERT_THAT(grown.back()->Start(), IsOk());
    options.shard_addresses.push_back(grown.back()->address());
  }
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client, IsOk());
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_THAT((*client)->Pull(kTable, keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(rows, at_checkpoint);
  // Their checkpoint records their first map: it restores there.
  ASSERT_THAT((*client)->Restore("c1"), IsOk());
}

TEST_F(ShardMapRoutingTest, InEtcdOneShardsNewMapReachesTheOthers) {
  EtcdProcess etcd;
  ASSERT_THAT(etcd.Start(), IsOk());
  StartShards(etcd.endpoint());
  const Move move = PlanMove(40);
  std::unique_ptr<PsClient> stale = MakeClient();
  const std::vector<float> initial = PullAll(*stale, move.keys);

  // Installed on shard 1 only (the bucket's old owner): it goes into etcd;
  // shard 0 still serves version 1.
  std::unique_ptr<ShardClient> shard0 =
      CreateGrpcShardClient(shards_[0]->address());
  ASSERT_THAT(SetMapOn(shards_[1]->address(), move.map),
              ::strata::testing::IsOkAndHolds(true));

  // A push by version 1: shard 0 applies its part under the push's
  // sequence, shard 1 refuses its part; the client fetches version 2 and
  // sends only the refused keys, under a new sequence, the moved one to
  // shard 0, which finds version 2 in etcd. Every row moves by exactly one
  // gradient: a key sent twice would move by 2, and the moved key sent
  // under the old sequence would be taken for a retry and not move.
  const std::vector<float> ones(move.keys.size() * kDim, 1.0f);
  ASSERT_THAT(stale->Push(kTable, move.keys, ones), IsOk());
  EXPECT_EQ(stale->shard_map()->version(), 2u);
  const std::vector<float> after = PullAll(*stale, move.keys);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i], initial[i] - 1.0f) << "key " << move.keys[i / kDim];
  }
  v1::ShardMap served;
  ASSERT_THAT(shard0->GetShardMap(&served, absl::Seconds(10)), IsOk());
  EXPECT_EQ(served.version(), 2u);

  // Through PsClient, on every shard: the first writes it into etcd, the
  // second finds it there.
  const std::vector<uint32_t> empty = EmptyBucketsOfShard1(move.keys, 1);
  ASSERT_EQ(empty.size(), 1u);
  absl::StatusOr<ShardMap> v3 = move.map.WithOwner(empty[0], 0);
  ASSERT_THAT(v3, IsOk());
  ASSERT_THAT(admin_->SetShardMap(*v3), IsOk());
  for (const auto& shard : shards_) {
    std::unique_ptr<ShardClient> client =
        CreateGrpcShardClient(shard->address());
    ASSERT_THAT(client->GetShardMap(&served, absl::Seconds(10)), IsOk());
    EXPECT_EQ(served.version(), 3u);
  }

  // A shard of the same cluster started with another count is refused,
  // naming both counts.
  ServerProcessOptions wrong;
  wrong.flags = testing::ReplicaFlags(etcd.endpoint(), 0, 1, "map-test");
  wrong.flags.push_back("--num_shards=3");
  wrong.flags.push_back("--shard_index=2");
  ServerProcess third(wrong);
  EXPECT_FALSE(third.Start().ok());
  EXPECT_THAT(third.log(),
              AllOf(HasSubstr("has 2 shards"), HasSubstr("--num_shards=3")));
}

TEST(ShardMapFailoverTest, APromotedReplicaServesTheMapItsPrimarySet) {
  EtcdProcess etcd;
  ASSERT_THAT(etcd.Start(), IsOk());
  std::vector<std::unique_ptr<ServerProcess>> replicas;
  std::vector<std::string> addresses;
  for (int r = 0; r < 2; ++r) {
    ServerProcessOptions options;
    options.flags = testing::ReplicaFlags(etcd.endpoint(), r, 2, "promo-test");
    replicas.push_back(std::make_unique<ServerProcess>(options));
    ASSERT_THAT(replicas.back()->Start(), IsOk());
    addresses.push_back(replicas.back()->address());
  }
  const int primary = testing::WaitForPrimaryOf(replicas);
  ASSERT_GE(primary, 0);
  PsClientOptions options;
  options.shard_addresses = {absl::StrJoin(addresses, "|")};
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  ASSERT_THAT(client, IsOk());
  ASSERT_THAT((*client)->CreateTable(SgdTable()), IsOk());
  // SetShardMap reaches the primary (and etcd); the follower's copy in
  // memory stays at version 1.
  absl::StatusOr<ShardMap> v2 =
      ShardMap::Create(2, 1, std::vector<uint32_t>(kNumBuckets, 0));
  ASSERT_THAT(v2, IsOk());
  ASSERT_THAT((*client)->SetShardMap(*v2), IsOk());

  ASSERT_THAT(replicas[primary]->Kill9(), IsOk());
  int promoted = -1;
  testing::WaitUntil(
      [&] { return (promoted = testing::PrimaryOf(replicas)) >= 0; },
      absl::Seconds(30), absl::Milliseconds(50));
  ASSERT_EQ(promoted, 1 - primary);
  // Promoted, it reads the map from etcd: a request routed by version 1 is
  // refused with version 2 (served, it could write buckets moved away).
  std::unique_ptr<ShardClient> shard =
      CreateGrpcShardClient(replicas[promoted]->address());
  absl::Status stale;
  testing::WaitUntil(
      [&] {
        stale = PullOn(*shard, {1, 2, 3}, 1);
        return !absl::IsUnavailable(stale);
      },
      absl::Seconds(30), absl::Milliseconds(50));
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("serves version 2")));
  EXPECT_EQ(ShardMapVersionOf(stale), 2u);
}

}  // namespace
}  // namespace strata
