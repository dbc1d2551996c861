// ShardFollower against a scripted in-process shard: resuming, snapshots,
// and what it does when the stream misbehaves.

#include "serving/shard_follower.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "rocksdb/env.h"
#include "serving/serving_store.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Kind = v1::ChangeBatch::Kind;

// The answer to one Subscribe: batches, then the status to end with, or
// none to hold the stream open until the follower cancels it.
struct Answer {
  std::vector<v1::ChangeBatch> batches;
  std::optional<grpc::Status> end;
};

class ScriptedShard final : public v1::ParameterServer::Service {
 public:
  // Answers the n-th Subscribe (from 0).
  explicit ScriptedShard(
      std::function<Answer(int, const v1::SubscribeRequest&)> script)
      : script_(std::move(script)) {}

  grpc::Status Subscribe(grpc::ServerContext* context,
                         const v1::SubscribeRequest* request,
                         grpc::ServerWriter<v1::ChangeBatch>* writer) override {
    int n = 0;
    {
      absl::MutexLock lock(&mu_);
      n = static_cast<int>(requests_.size());
      requests_.push_back(*request);
    }
    const Answer answer = script_(n, *request);
    for (const v1::ChangeBatch& batch : answer.batches) {
      if (!writer->Write(batch)) return grpc::Status::CANCELLED;
    }
    if (answer.end.has_value()) return *answer.end;
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(2));
    return grpc::Status::CANCELLED;
  }

  std::vector<v1::SubscribeRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  std::function<Answer(int, const v1::SubscribeRequest&)> script_;
  absl::Mutex mu_;
  std::vector<v1::SubscribeRequest> requests_ ABSL_GUARDED_BY(mu_);
};

v1::ChangeBatch Batch(Kind kind, uint64_t incarnation, uint64_t sequence,
                      uint32_t shard_index = 0) {
  v1::ChangeBatch batch;
  batch.set_kind(kind);
  batch.set_incarnation(incarnation);
  batch.set_sequence(sequence);
  batch.set_latest_sequence(sequence);
  batch.set_shard_index(shard_index);
  batch.set_num_shards(1);
  batch.set_acknowledged_micros(absl::ToUnixMicros(absl::Now()));
  return batch;
}

// A DELTA (or snapshot rows) setting `key` of table "t" to {value, value}.
v1::ChangeBatch Rows(Kind kind, uint64_t incarnation, uint64_t sequence,
                     uint64_t key, float value) {
  v1::ChangeBatch batch = Batch(kind, incarnation, sequence);
  v1::TableBatch* rows = batch.add_rows();
  rows->set_table("t");
  rows->add_keys(key);
  rows->add_values(value);
  rows->add_values(value);
  return batch;
}

v1::ChangeBatch SnapshotBegin(uint64_t incarnation, uint64_t sequence) {
  v1::ChangeBatch batch =
      Batch(v1::ChangeBatch::SNAPSHOT_BEGIN, incarnation, sequence);
  v1::TableConfig* table = batch.add_table_configs();
  table->set_name("t");
  table->set_dim(2);
  table->mutable_optimizer()->set_type(v1::SGD);
  return batch;
}

// A snapshot of incarnation 5 at sequence 3 holding key 1 = 1.0.
std::vector<v1::ChangeBatch> FirstSnapshot() {
  return {SnapshotBegin(5, 3), Rows(v1::ChangeBatch::SNAPSHOT_ROWS, 5, 3, 1, 1),
          Batch(v1::ChangeBatch::SNAPSHOT_END, 5, 3)};
}

class ShardFollowerTest : public ::testing::Test {
 protected:
  ShardFollowerTest() : env_(rocksdb::NewMemEnv(rocksdb::Env::Default())) {
    ServingStoreOptions options;
    options.data_dir = "/serving";
    options.rocksdb_env = env_.get();
    store_ = *ServingStore::Open(options);
  }

  ~ShardFollowerTest() override {
    if (follower_ != nullptr) follower_->Stop();
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  void Start(std::function<Answer(int, const v1::SubscribeRequest&)> script,
             absl::Duration idle_timeout = absl::Seconds(10)) {
    shard_ = std::make_unique<ScriptedShard>(std::move(script));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(shard_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ShardFollowerOptions options;
    options.address = "127.0.0.1:" + std::to_string(port);
    options.store = store_.get();
    options.initial_backoff = absl::Milliseconds(5);
    options.max_backoff = absl::Milliseconds(20);
    options.idle_timeout = idle_timeout;
    follower_ = std::make_unique<ShardFollower>(options);
    follower_->Start();
  }

  // Waits (up to 10 s) until `done` holds for the follower's state.
  FollowState WaitFor(const std::function<bool(const FollowState&)>& done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    FollowState state = follower_->state();
    while (!done(state) && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(2));
      state = follower_->state();
    }
    EXPECT_TRUE(done(state)) << "applied=" << state.applied_sequence
                             << " last_error=" << state.last_error;
    return state;
  }

  std::vector<float> Lookup(uint64_t key) {
    std::vector<float> out(2);
    const std::vector<uint64_t> keys = {key};
    EXPECT_THAT(store_->Lookup("t", keys, absl::MakeSpan(out)), IsOk());
    return out;
  }

  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<ServingStore> store_;
  std::unique_ptr<ScriptedShard> shard_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ShardFollower> follower_;
};

TEST_F(ShardFollowerTest, ResumesFromTheStoredPositionAfterASnapshot) {
  Start([](int n, const v1::SubscribeRequest&) {
    if (n == 0) {
      std::vector<v1::ChangeBatch> batches = FirstSnapshot();
      batches.push_back(Rows(v1::ChangeBatch::DELTA, 5, 4, 2, 4));
      return Answer{batches, grpc::Status(grpc::StatusCode::UNAVAILABLE, "")};
    }
    return Answer{{Rows(v1::ChangeBatch::DELTA, 5, 5, 1, 5)}, std::nullopt};
  });
  const FollowState state =
      WaitFor([](const FollowState& s) { return s.applied_sequence == 5; });
  EXPECT_EQ(state.incarnation, 5u);
  EXPECT_EQ(state.snapshots, 1u);
  EXPECT_EQ(state.resumes, 1u);
  EXPECT_TRUE(state.connected);
  EXPECT_EQ(state.lag_seconds, 0.0);
  const std::vector<v1::SubscribeRequest> requests = shard_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].incarnation(), 0u);
  EXPECT_EQ(requests[1].incarnation(), 5u);
  EXPECT_EQ(requests[1].from_sequence(), 4u);
  EXPECT_THAT(Lookup(1), ElementsAre(5, 5));
  EXPECT_THAT(Lookup(2), ElementsAre(4, 4));
}

TEST_F(ShardFollowerTest, AGapInTheSequenceEndsTheStreamWithoutApplyingIt) {
  Start([](int n, const v1::SubscribeRequest&) {
    std::vector<v1::ChangeBatch> batches;
    if (n == 0) batches = FirstSnapshot();
    batches.push_back(Rows(v1::ChangeBatch::DELTA, 5, 5, 2, 9));  // No 4.
    return Answer{batches, std::nullopt};
  });
  const FollowState state = WaitFor(
      [&](const FollowState&) { return shard_->requests().size() >= 3; });
  EXPECT_THAT(state.last_error, HasSubstr("update 5 follows 3"));
  EXPECT_EQ(store_->Position(0).sequence, 3u);
  EXPECT_EQ(shard_->requests().back().from_sequence(), 3u);
  std::vector<float> out(2);
  const std::vector<uint64_t> keys = {2};
  EXPECT_THAT(store_->Lookup("t", keys, absl::MakeSpan(out)),
              IsOkAndHolds(1));  // Key 2 was never applied.
}

TEST_F(ShardFollowerTest, AShardListedInTheWrongPlaceIsNeverApplied) {
  Start([](int, const v1::SubscribeRequest&) {
    v1::ChangeBatch begin = SnapshotBegin(5, 3);
    begin.set_shard_index(1);
    begin.set_num_shards(2);
    return Answer{{begin}, std::nullopt};
  });
  const FollowState state =
      WaitFor([](const FollowState& s) { return !s.last_error.empty(); });
  EXPECT_THAT(state.last_error, HasSubstr("--shards"));
  EXPECT_FALSE(state.connected);
  EXPECT_TRUE(store_->ListTables().empty());
}

TEST_F(ShardFollowerTest, ANewIncarnationsSnapshotReplacesTheRows) {
  Start([](int n, const v1::SubscribeRequest&) {
    if (n == 0) {
      std::vector<v1::ChangeBatch> batches = FirstSnapshot();
      batches.push_back(Rows(v1::ChangeBatch::DELTA, 5, 4, 2, 4));
      return Answer{batches, grpc::Status(grpc::StatusCode::UNAVAILABLE, "")};
    }
    // The shard restarted from a checkpoint holding key 2 only.
    return Answer{
        {SnapshotBegin(9, 1), Rows(v1::ChangeBatch::SNAPSHOT_ROWS, 9, 1, 2, 7),
         Batch(v1::ChangeBatch::SNAPSHOT_END, 9, 1)},
        std::nullopt};
  });
  const FollowState state =
      WaitFor([](const FollowState& s) { return s.incarnation == 9; });
  EXPECT_EQ(state.applied_sequence, 1u);
  EXPECT_EQ(state.snapshots, 2u);
  EXPECT_THAT(Lookup(1), ElementsAre(0, 0));  // Gone from the shard.
  EXPECT_THAT(Lookup(2), ElementsAre(7, 7));
}

TEST_F(ShardFollowerTest, ASilentStreamIsCancelledAndOpenedAgain) {
  Start(
      [](int n, const v1::SubscribeRequest&) {
        return Answer{n == 0 ? FirstSnapshot() : std::vector<v1::ChangeBatch>{},
                      std::nullopt};
      },
      /*idle_timeout=*/absl::Milliseconds(100));
  const FollowState state = WaitFor([&](const FollowState& s) {
    return shard_->requests().size() >= 3 && !s.last_error.empty();
  });
  EXPECT_THAT(state.last_error, HasSubstr("sent nothing"));
  EXPECT_EQ(shard_->requests().back().from_sequence(), 3u);
}

TEST_F(ShardFollowerTest, OutOfRangeAsksForASnapshotNext) {
  Start([](int n, const v1::SubscribeRequest&) {
    if (n == 0) {
      return Answer{FirstSnapshot(),
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "")};
    }
    if (n == 1) {
      return Answer{{}, grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "ahead")};
    }
    return Answer{{}, std::nullopt};
  });
  WaitFor([&](const FollowState&) { return shard_->requests().size() >= 3; });
  const std::vector<v1::SubscribeRequest> requests = shard_->requests();
  EXPECT_EQ(requests[1].incarnation(), 5u);
  EXPECT_EQ(requests[2].incarnation(), 0u);
  EXPECT_EQ(requests[2].from_sequence(), 0u);
}

}  // namespace
}  // namespace strata
