// PsClient's routing by the shard map, its refresh after a refusal, and its
// retries, against in-process fake shards behind the ShardClient seam and a
// fake clock (nothing sleeps). The same behaviour against real shards is in
// shard_map_routing_test.cc.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "client/shard_client.h"
#include "common/hash.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/shard_map_proto.h"
#include "proto/strata.grpc.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/forwarding_shard_client.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::FakeClock;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kTable[] = "t";
constexpr size_t kDim = 2;

// One shard in the process: it serves by its own shard map as strata-server
// does (refuses an older version or a key it does not own, carrying its
// version; serves a newer version by its own map; a retry of an applied push
// is a duplicate), keeps rows of kDim floats that start at the key's value, and
// counts what it was asked. Calls answer at once, on the caller's thread.
class FakeShard : public ShardClient {
 public:
  FakeShard(uint32_t index, ShardMap map, std::atomic<int>* install_clock)
      : index_(index),
        address_(absl::StrCat("fake-", index)),
        install_clock_(install_clock),
        map_(map) {}

  void set_map(ShardMap map) {
    absl::MutexLock lock(&mu_);
    map_ = std::move(map);
  }
  // The map gets one version newer before every pull and push is checked (a
  // map that keeps changing under the client).
  void bump_on_every_request() {
    absl::MutexLock lock(&mu_);
    bump_ = true;
  }
  // Every pull and push answers `status` from now on.
  void fail_everything(absl::Status status) {
    absl::MutexLock lock(&mu_);
    failure_ = std::move(status);
  }
  int map_fetches() {
    absl::MutexLock lock(&mu_);
    return map_fetches_;
  }
  // The (sequence, keys) of every push applied, in order.
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> applied() {
    absl::MutexLock lock(&mu_);
    return applied_;
  }
  std::vector<float> row(uint64_t key) {
    absl::MutexLock lock(&mu_);
    return RowLocked(key);
  }

  const std::string& address() const override { return address_; }

  void PullAsync(const v1::PullRequest& request, grpc::ByteBuffer* response,
                 absl::Duration, Done done) override {
    absl::MutexLock lock(&mu_);
    if (absl::Status routed =
            CheckLocked(request.shard_map_version(), request.batches(0));
        !routed.ok()) {
      done(routed);
      return;
    }
    v1::PullResponse answer;
    v1::TableBatch* batch = answer.add_batches();
    for (uint64_t key : request.batches(0).keys()) {
      for (float value : RowLocked(key)) batch->add_values(value);
    }
    bool own = false;
    grpc::Status serialized =
        grpc::SerializationTraits<v1::PullResponse>::Serialize(answer, response,
                                                               &own);
    done(serialized.ok() ? absl::OkStatus() : absl::InternalError("serialize"));
  }

  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration, Done done) override {
    absl::MutexLock lock(&mu_);
    const bool applied_before =
        seen_.contains(std::make_pair(request.client_id(), request.sequence()));
    absl::Status routed =
        CheckLocked(request.shard_map_version(), request.batches(0));
    if (!routed.ok() && !(ShardMapVersionOf(routed) && applied_before)) {
      done(routed);
      return;
    }
    response->set_duplicate(applied_before);
    if (!applied_before) {
      seen_.insert(std::make_pair(request.client_id(), request.sequence()));
      const v1::TableBatch& batch = request.batches(0);
      std::vector<uint64_t> keys(batch.keys().begin(), batch.keys().end());
      for (size_t i = 0; i < keys.size(); ++i) {
        std::vector<float>& row =
            rows_.try_emplace(keys[i], RowLocked(keys[i])).first->second;
        for (size_t d = 0; d < kDim; ++d) {
          row[d] -= batch.values(static_cast<int>(i * kDim + d));
        }
      }
      applied_.emplace_back(request.sequence(), std::move(keys));
    }
    done(absl::OkStatus());
  }

  absl::Status GetShardMap(v1::ShardMap* response, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    ++map_fetches_;
    *response = ShardMapToProto(map_);
    return absl::OkStatus();
  }

  absl::Status SetShardMap(const v1::SetShardMapRequest& request,
                           v1::SetShardMapResponse* response,
                           absl::Duration) override {
    absl::StatusOr<ShardMap> map = ShardMapFromProto(request.map());
    if (!map.ok()) return map.status();
    absl::MutexLock lock(&mu_);
    map_ = *std::move(map);
    installed_at_ = install_clock_->fetch_add(1);
    response->set_changed(true);
    return absl::OkStatus();
  }
  // When SetShardMap reached this shard, on a clock the shards share.
  int installed_at() {
    absl::MutexLock lock(&mu_);
    return installed_at_;
  }
  absl::Status CreateTable(const v1::CreateTableRequest&,
                           v1::CreateTableResponse*, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status ListTables(v1::ListTablesResponse*, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Stats(v1::StatsResponse*, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Checkpoint(const v1::CheckpointRequest&, v1::CheckpointResponse*,
                          absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status Restore(const v1::RestoreRequest&, v1::RestoreResponse*,
                       absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status CheckHealth(absl::Duration) override { return absl::OkStatus(); }

 private:
  absl::Status CheckLocked(uint64_t version, const v1::TableBatch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!failure_.ok()) return failure_;
    if (bump_) {
      map_ = *ShardMap::Create(map_.version() + 1, map_.num_shards(),
                               map_.owners());
    }
    // As strata-server: an older version is refused; a newer one is served
    // by the shard's own map, and a key it gives another shard is
    // UNAVAILABLE then (the shard has not got the newer map yet).
    if (version < map_.version()) {
      return ShardMapMismatchError("older map", map_.version());
    }
    for (uint64_t key : batch.keys()) {
      if (map_.OwnerOfKey(HashString(batch.table()), key) == index_) continue;
      if (version > map_.version()) {
        return absl::UnavailableError("newer map, not here yet");
      }
      return ShardMapMismatchError("not mine", map_.version());
    }
    return absl::OkStatus();
  }
  std::vector<float> RowLocked(uint64_t key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = rows_.find(key);
    if (it != rows_.end()) return it->second;
    return std::vector<float>(kDim, static_cast<float>(key));
  }

  const uint32_t index_;
  const std::string address_;
  std::atomic<int>* const install_clock_;
  absl::Mutex mu_;
  int installed_at_ ABSL_GUARDED_BY(mu_) = -1;
  ShardMap map_ ABSL_GUARDED_BY(mu_);
  bool bump_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int map_fetches_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::vector<float>> rows_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::pair<std::string, uint64_t>> seen_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> applied_
      ABSL_GUARDED_BY(mu_);
};

class PsClientRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t s = 0; s < 3; ++s) {
      shards_.push_back(
          std::make_unique<FakeShard>(s, ShardMap::Modulo(3), &install_clock_));
    }
    PsClientOptions options;
    for (const auto& shard : shards_) {
      options.shard_addresses.push_back(shard->address());
    }
    options.clock = &clock_;
    options.shard_client_factory = [this](const std::string& address) {
      const size_t index = static_cast<size_t>(address.back() - '0');
      return std::unique_ptr<ShardClient>(
          new testing::ForwardingShardClient(shards_[index].get()));
    };
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    ASSERT_THAT(client, IsOk());
    client_ = *std::move(client);
  }

  // Keys 1.. until `n` of each shard's under the first map, and a key of
  // shard 1 whose bucket version 2 gives to shard 2 (only shards 1 and 2
  // get version 2; shard 0 keeps version 1).
  void MoveOneBucket(size_t n) {
    const ShardMap first = ShardMap::Modulo(3);
    std::vector<size_t> per_shard(3, 0);
    for (uint64_t key = 1;
         per_shard[0] < n || per_shard[1] < n || per_shard[2] < n; ++key) {
      const uint32_t owner = first.OwnerOfKey(HashString(kTable), key);
      if (per_shard[owner] == n) continue;
      ++per_shard[owner];
      keys_.push_back(key);
      if (owner == 1 && moved_key_ == 0) moved_key_ = key;
    }
    absl::StatusOr<ShardMap> next =
        first.WithOwner(BucketOf(HashString(kTable), moved_key_), 2);
    ASSERT_THAT(next, IsOk());
    shards_[1]->set_map(*next);
    shards_[2]->set_map(*next);
  }

  FakeClock clock_;
  std::atomic<int> install_clock_{0};
  std::vector<std::unique_ptr<FakeShard>> shards_;
  std::unique_ptr<PsClient> client_;
  std::vector<uint64_t> keys_;
  uint64_t moved_key_ = 0;
};

TEST_F(PsClientRoutingTest, APullAsksOnlyTheRefusingShardsForTheNewMap) {
  MoveOneBucket(4);
  std::vector<float> rows(keys_.size() * kDim);
  ASSERT_THAT(client_->Pull(kTable, keys_, absl::MakeSpan(rows)), IsOk());
  for (size_t i = 0; i < keys_.size(); ++i) {
    EXPECT_THAT(std::vector<float>(rows.begin() + i * kDim,
                                   rows.begin() + (i + 1) * kDim),
                ElementsAre(keys_[i], keys_[i]));
  }
  EXPECT_EQ(client_->shard_map()->version(), 2u);
  EXPECT_EQ(client_->ShardOf(kTable, moved_key_), 2u);
  // Shard 0 answered by version 1 (its own) and was not asked for a map.
  EXPECT_EQ(shards_[0]->map_fetches(), 0);
  EXPECT_EQ(shards_[1]->map_fetches() + shards_[2]->map_fetches(), 2);
}

TEST_F(PsClientRoutingTest, APushResendsOnlyRefusedKeysUnderANewSequence) {
  MoveOneBucket(4);
  const std::vector<float> ones(keys_.size() * kDim, 1.0f);
  ASSERT_THAT(client_->Push(kTable, keys_, ones), IsOk());
  // Shard 0 took its keys once, under the first sequence; shards 1 and 2
  // refused theirs, which came again under the next sequence, the moved key
  // to shard 2.
  const auto on0 = shards_[0]->applied();
  const auto on1 = shards_[1]->applied();
  const auto on2 = shards_[2]->applied();
  ASSERT_EQ(on0.size(), 1u);
  ASSERT_EQ(on1.size(), 1u);
  ASSERT_EQ(on2.size(), 1u);
  EXPECT_EQ(on1[0].first, on0[0].first + 1);
  EXPECT_EQ(on2[0].first, on0[0].first + 1);
  EXPECT_THAT(on2[0].second, ::testing::Contains(moved_key_));
  EXPECT_EQ(on0[0].second.size() + on1[0].second.size() + on2[0].second.size(),
            keys_.size());
  EXPECT_THAT(shards_[2]->row(moved_key_),
              ElementsAre(moved_key_ - 1.0f, moved_key_ - 1.0f));
  EXPECT_THAT(shards_[1]->row(moved_key_), ElementsAre(moved_key_, moved_key_));
}

TEST_F(PsClientRoutingTest, AMapThatKeepsChangingEndsTheCallAfterEightTries) {
  MoveOneBucket(1);
  shards_[1]->bump_on_every_request();
  shards_[2]->bump_on_every_request();
  std::vector<float> rows(keys_.size() * kDim);
  EXPECT_THAT(client_->Pull(kTable, keys_, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the shard map changed 8 times")));
}

TEST_F(PsClientRoutingTest, AMapOfMoreShardsThanAddressesIsRefused) {
  MoveOneBucket(1);
  absl::StatusOr<ShardMap> wider =
      ShardMap::Create(3, 4, std::vector<uint32_t>(kNumBuckets, 3));
  ASSERT_THAT(wider, IsOk());
  shards_[1]->set_map(*wider);
  std::vector<float> rows(keys_.size() * kDim);
  EXPECT_THAT(client_->Pull(kTable, keys_, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has 4 shards, but this client was given 3 "
                                 "shard addresses")));
}

TEST_F(PsClientRoutingTest, AShardBehindTheClientsMapServesItsOwnBuckets) {
  MoveOneBucket(2);
  // Learned from shard 1: version 2, which shard 0 (whose buckets did not
  // change) never got. Its keys are still answered, by version 2.
  std::vector<float> rows(keys_.size() * kDim);
  ASSERT_THAT(client_->Pull(kTable, keys_, absl::MakeSpan(rows)), IsOk());
  ASSERT_EQ(client_->shard_map()->version(), 2u);
  ASSERT_THAT(client_->Pull(kTable, keys_, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(shards_[0]->map_fetches(), 0);
}

TEST_F(PsClientRoutingTest, SetShardMapReachesTheShardGivingBucketsAwayFirst) {
  // Version 2 takes a bucket from shard 2 and gives it to shard 0.
  uint32_t bucket = 2;
  absl::StatusOr<ShardMap> next = ShardMap::Modulo(3).WithOwner(bucket, 0);
  ASSERT_THAT(next, IsOk());
  ASSERT_THAT(client_->SetShardMap(*next), IsOk());
  EXPECT_EQ(shards_[2]->installed_at(), 0);  // the one giving it away
  EXPECT_EQ(shards_[0]->installed_at(), 1);  // the one gaining it
  EXPECT_EQ(shards_[1]->installed_at(), 2);
  EXPECT_EQ(client_->shard_map()->version(), 2u);
}

TEST_F(PsClientRoutingTest, AShardThatGainsABucketLateIsWaitedFor) {
  // Version 2 gives a bucket of shard 1 to shard 0, and only shard 1 has
  // it. The client learns it from shard 1's refusal and sends the bucket's
  // key to shard 0, which has not got version 2: UNAVAILABLE, retried to
  // the deadline (on the fake clock), not a refusal to re-route by (which
  // would loop: shard 0's map is older than the client's).
  const ShardMap first = ShardMap::Modulo(3);
  uint64_t key = 1;
  while (first.OwnerOfKey(HashString(kTable), key) != 1) ++key;
  absl::StatusOr<ShardMap> next =
      first.WithOwner(BucketOf(HashString(kTable), key), 0);
  ASSERT_THAT(next, IsOk());
  shards_[1]->set_map(*next);
  std::vector<float> row(kDim);
  const absl::Time before = clock_.Now();
  EXPECT_THAT(client_->Pull(kTable, {key}, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("gave up after retrying")));
  EXPECT_GE(clock_.Now() - before, absl::Seconds(30));
  EXPECT_EQ(client_->shard_map()->version(), 2u);
  EXPECT_EQ(shards_[0]->map_fetches(), 0);
}

TEST_F(PsClientRoutingTest, UnavailableShardsAreRetriedOnTheInjectedClock) {
  // A shard that keeps answering UNAVAILABLE: the client backs off on the
  // fake clock (nothing sleeps) until its retry deadline.
  shards_[0]->fail_everything(absl::UnavailableError("restarting"));
  std::vector<uint64_t> keys = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> rows(keys.size() * kDim);
  const absl::Time before = clock_.Now();
  EXPECT_THAT(client_->Pull(kTable, keys, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("gave up after retrying for 30s")));
  EXPECT_GE(clock_.Now() - before, absl::Seconds(30));
}

}  // namespace
}  // namespace strata
