// The change stream (ParameterServer.Subscribe) of a shard behind a real
// loopback gRPC server with a real RocksDB store.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "server/shard_service.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::testing::ElementsAre;

constexpr uint32_t kDim = 2;

v1::TableConfig SgdTable(const std::string& name) {
  v1::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

class SubscribeTest : public ::testing::Test {
 protected:
  // The change log's budget; a subclass makes it small.
  virtual size_t ChangeLogBytes() const { return size_t{64} << 20; }
  // A subclass changes the service's limits.
  virtual void Configure(ShardServiceOptions&) const {}
  virtual Durability StoreDurability() const { return Durability::kGroup; }

  void SetUp() override {
    EmbeddingStoreOptions store_options;
    store_options.data_dir = dir_.path() + "/data";
    store_options.change_log_bytes = ChangeLogBytes();
    store_options.durability = StoreDurability();
    auto store = EmbeddingStore::Open(store_options);
    ASSERT_THAT(store.status(), IsOk());
    store_ = *std::move(store);
    ShardServiceOptions options;
    options.store = store_.get();
    Configure(options);
    service_ = std::make_unique<ShardService>(options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::ParameterServer::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    CreateTable("a");
    CreateTable("b");
  }

  void TearDown() override {
    for (auto& context : contexts_) context->TryCancel();
    readers_.clear();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
    }
  }

  void CreateTable(const std::string& name) {
    grpc::ClientContext context;
    v1::CreateTableRequest request;
    *request.mutable_config() = SgdTable(name);
    v1::CreateTableResponse response;
    ASSERT_TRUE(stub_->CreateTable(&context, request, &response).ok());
  }

  // Pushes gradient `g` for every coordinate of `keys` of `table`.
  void Push(const std::string& table, const std::vector<uint64_t>& keys,
            float g) {
    grpc::ClientContext context;
    v1::PushRequest request;
    v1::TableBatch* batch = request.add_batches();
    batch->set_table(table);
    batch->mutable_keys()->Add(keys.begin(), keys.end());
    for (size_t i = 0; i < keys.size() * kDim; ++i) batch->add_values(g);
    v1::PushResponse response;
    ASSERT_TRUE(stub_->Push(&context, request, &response).ok());
  }

  grpc::ClientReader<v1::ChangeBatch>* Subscribe(
      uint64_t incarnation, uint64_t from,
      const std::vector<std::string>& tables = {},
      std::chrono::seconds deadline = std::chrono::seconds(20)) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + deadline);
    v1::SubscribeRequest request;
    request.set_incarnation(incarnation);
    request.set_from_sequence(from);
    for (const std::string& table : tables) request.add_tables(table);
    readers_.push_back(stub_->Subscribe(context.get(), request));
    contexts_.push_back(std::move(context));
    return readers_.back().get();
  }

  // The next batch that is not a heartbeat.
  static v1::ChangeBatch Next(grpc::ClientReader<v1::ChangeBatch>* reader) {
    v1::ChangeBatch batch;
    while (reader->Read(&batch)) {
      if (batch.kind() != v1::ChangeBatch::HEARTBEAT) return batch;
    }
    ADD_FAILURE() << "stream ended: " << reader->Finish().error_message();
    return batch;
  }

  testing::TempDir dir_{"subscribe"};
  std::unique_ptr<EmbeddingStore> store_;
  std::unique_ptr<ShardService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::ChangeBatch>>> readers_;
};

TEST_F(SubscribeTest, NewFollowerGetsASnapshotThenDeltasInOrder) {
  Push("a", {1, 2}, 0.5f);
  auto* reader = Subscribe(0, 0);
  v1::ChangeBatch begin = Next(reader);
  ASSERT_EQ(begin.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  EXPECT_EQ(begin.table_configs_size(), 2);
  const uint64_t snapshot_sequence = begin.sequence();
  EXPECT_EQ(snapshot_sequence, 3u);  // Two table creations and one push.
  v1::ChangeBatch rows = Next(reader);
  ASSERT_EQ(rows.kind(), v1::ChangeBatch::SNAPSHOT_ROWS);
  ASSERT_EQ(rows.rows_size(), 1);
  EXPECT_EQ(rows.rows(0).table(), "a");
  EXPECT_EQ(rows.rows(0).keys_size(), 2);
  EXPECT_THAT(rows.rows(0).values(), ElementsAre(-0.5f, -0.5f, -0.5f, -0.5f));
  v1::ChangeBatch end = Next(reader);
  ASSERT_EQ(end.kind(), v1::ChangeBatch::SNAPSHOT_END);
  EXPECT_EQ(end.sequence(), snapshot_sequence);

  Push("a", {2}, 1.0f);
  Push("b", {9}, 2.0f);
  v1::ChangeBatch first = Next(reader);
  ASSERT_EQ(first.kind(), v1::ChangeBatch::DELTA);
  EXPECT_EQ(first.sequence(), snapshot_sequence + 1);
  EXPECT_EQ(first.incarnation(), begin.incarnation());
  EXPECT_GT(first.acknowledged_micros(), 0);
  ASSERT_EQ(first.rows_size(), 1);
  EXPECT_THAT(first.rows(0).keys(), ElementsAre(2u));
  // Full new values, not increments: -0.5 - 1.0.
  EXPECT_THAT(first.rows(0).values(), ElementsAre(-1.5f, -1.5f));
  v1::ChangeBatch second = Next(reader);
  EXPECT_EQ(second.sequence(), snapshot_sequence + 2);
  ASSERT_EQ(second.rows_size(), 1);
  EXPECT_EQ(second.rows(0).table(), "b");
}

// Periodic pushes apply concurrently and fill their change records by
// reading their rows again; until a stream first reads the log they leave
// the rows out, and no follower may ever be sent such a record.
class PeriodicSubscribeTest : public SubscribeTest {
 protected:
  Durability StoreDurability() const override { return Durability::kPeriodic; }
};

TEST_F(PeriodicSubscribeTest, PushesBeforeTheFirstFollowerReachItBySnapshot) {
  Push("a", {1, 2}, 0.5f);
  Push("a", {2}, 1.0f);
  auto* reader = Subscribe(0, 0);
  v1::ChangeBatch begin = Next(reader);
  ASSERT_EQ(begin.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  EXPECT_EQ(begin.sequence(), 4u);  // Two table creations and two pushes.
  v1::ChangeBatch rows = Next(reader);
  ASSERT_EQ(rows.kind(), v1::ChangeBatch::SNAPSHOT_ROWS);
  ASSERT_EQ(rows.rows_size(), 1);
  ASSERT_EQ(rows.rows(0).keys_size(), 2);
  const bool one_first = rows.rows(0).keys(0) == 1;
  EXPECT_THAT(rows.rows(0).values(),
              one_first ? ElementsAre(-0.5f, -0.5f, -1.5f, -1.5f)
                        : ElementsAre(-1.5f, -1.5f, -0.5f, -0.5f));
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_END);
  Push("a", {1}, 2.0f);
  v1::ChangeBatch delta = Next(reader);
  ASSERT_EQ(delta.kind(), v1::ChangeBatch::DELTA);
  EXPECT_EQ(delta.sequence(), 5u);
  ASSERT_EQ(delta.rows_size(), 1);
  EXPECT_THAT(delta.rows(0).keys(), ElementsAre(1u));
  EXPECT_THAT(delta.rows(0).values(), ElementsAre(-2.5f, -2.5f));

  // A follower of this incarnation asking for the records from before the
  // first reader gets a snapshot instead of records without rows.
  auto* resumed = Subscribe(begin.incarnation(), 1);
  v1::ChangeBatch first = Next(resumed);
  EXPECT_EQ(first.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  EXPECT_EQ(first.sequence(), 5u);
}

// After a map gives half of the buckets to a shard 1 (as a reshard does
// once it moved them), a snapshot holds the rows of this shard's buckets
// only: the others' rows are the moved copies' old values.
TEST_F(SubscribeTest, ASnapshotHoldsOnlyTheRowsOfOwnedBuckets) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 40; ++key) keys.push_back(key);
  Push("a", keys, 0.5f);
  v1::SetShardMapRequest set;
  set.mutable_map()->set_version(2);
  set.mutable_map()->set_num_shards(2);
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    set.mutable_map()->add_bucket_owners(b % 2);
  }
  {
    grpc::ClientContext context;
    v1::SetShardMapResponse response;
    ASSERT_TRUE(stub_->SetShardMap(&context, set, &response).ok());
  }
  std::vector<uint64_t> owned;
  for (uint64_t key : keys) {
    if (BucketOf(HashString("a"), key) % 2 == 0) owned.push_back(key);
  }
  ASSERT_GT(owned.size(), 0u);
  ASSERT_LT(owned.size(), keys.size());

  auto* reader = Subscribe(0, 0);
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  std::vector<uint64_t> sent;
  for (v1::ChangeBatch batch = Next(reader);
       batch.kind() == v1::ChangeBatch::SNAPSHOT_ROWS; batch = Next(reader)) {
    for (const v1::TableBatch& rows : batch.rows()) {
      EXPECT_EQ(rows.values_size(), rows.keys_size() * static_cast<int>(kDim));
      sent.insert(sent.end(), rows.keys().begin(), rows.keys().end());
    }
  }
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, owned);
}

TEST_F(SubscribeTest, FollowerOfTheSameIncarnationResumesWithoutSnapshot) {
  auto* first = Subscribe(0, 0);
  v1::ChangeBatch begin = Next(first);
  ASSERT_EQ(begin.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  Push("a", {1}, 1.0f);
  Push("a", {1}, 1.0f);
  auto* resumed = Subscribe(begin.incarnation(), begin.sequence() + 1);
  v1::ChangeBatch next = Next(resumed);
  ASSERT_EQ(next.kind(), v1::ChangeBatch::DELTA);
  EXPECT_EQ(next.sequence(), begin.sequence() + 2);
  EXPECT_THAT(next.rows(0).values(), ElementsAre(-2.0f, -2.0f));
}

TEST_F(SubscribeTest, FutureSequenceIsOutOfRange) {
  auto* first = Subscribe(0, 0);
  v1::ChangeBatch begin = Next(first);
  auto* future = Subscribe(begin.incarnation(), begin.sequence() + 100);
  v1::ChangeBatch batch;
  EXPECT_FALSE(future->Read(&batch));
  grpc::Status status = future->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("past"));
}

TEST_F(SubscribeTest, AnotherIncarnationStartsWithASnapshot) {
  Push("a", {1}, 1.0f);
  auto* reader = Subscribe(12345, 2);
  EXPECT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
}

TEST_F(SubscribeTest, UnfollowedTablesAdvanceTheSequenceWithoutRows) {
  auto* reader = Subscribe(0, 0, {"a"});
  v1::ChangeBatch begin = Next(reader);
  ASSERT_EQ(begin.table_configs_size(), 1);
  EXPECT_EQ(begin.table_configs(0).name(), "a");
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_END);
  Push("b", {1}, 1.0f);
  v1::ChangeBatch delta = Next(reader);
  EXPECT_EQ(delta.sequence(), begin.sequence() + 1);
  EXPECT_EQ(delta.rows_size(), 0);
}

TEST_F(SubscribeTest, RestoreOfACheckpointStartsANewSnapshot) {
  Push("a", {1}, 1.0f);
  ASSERT_THAT(store_->Checkpoint("c1", 1).status(), IsOk());
  auto* reader = Subscribe(0, 0);
  v1::ChangeBatch begin = Next(reader);
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_ROWS);
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::SNAPSHOT_END);
  Push("a", {1}, 1.0f);
  ASSERT_EQ(Next(reader).kind(), v1::ChangeBatch::DELTA);
  ASSERT_THAT(store_->Restore("c1").status(), IsOk());
  v1::ChangeBatch again = Next(reader);
  ASSERT_EQ(again.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  EXPECT_NE(again.incarnation(), begin.incarnation());
  v1::ChangeBatch rows = Next(reader);
  ASSERT_EQ(rows.kind(), v1::ChangeBatch::SNAPSHOT_ROWS);
  EXPECT_THAT(rows.rows(0).values(), ElementsAre(-1.0f, -1.0f));
}

class SlowFollowerTest : public SubscribeTest {
 protected:
  size_t ChangeLogBytes() const override { return 32 << 10; }
};

TEST_F(SlowFollowerTest, FollowerPastWhatTheLogKeepsGetsANewSnapshot) {
  // 400 pushes of 4096 rows take 20 s under ASan on a loaded 2-core machine;
  // the stream's deadline must outlast them.
  auto* reader = Subscribe(0, 0, {"a"}, std::chrono::seconds(180));
  v1::ChangeBatch begin = Next(reader);
  ASSERT_EQ(begin.kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  // The follower reads nothing while 26 MB of updates go by, more than
  // gRPC and the sockets buffer: flow control holds the shard's producer
  // back, the 32 KiB log drops what the follower has not read, and the
  // shard's memory stays bounded.
  constexpr int kPushes = 400;
  std::vector<uint64_t> keys(4096);
  for (int push = 0; push < kPushes; ++push) {
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + push * 4096 + i;
    Push("a", keys, 1.0f);
  }
  Push("a", {7}, 1.0f);  // Key 7 ends at -1.
  const uint64_t last = begin.sequence() + kPushes + 1;
  // Reading again, the follower must meet a new snapshot (taken whenever the
  // producer found a gap, maybe more than once), and following the stream as
  // a follower does must rebuild every row.
  std::map<uint64_t, float> rows;
  uint64_t at = 0;  // The sequence the follower's state is at.
  bool in_snapshot = true;
  bool new_snapshots = false;
  while (in_snapshot || at < last) {
    const v1::ChangeBatch batch = Next(reader);
    switch (batch.kind()) {
      case v1::ChangeBatch::DELTA:
        ASSERT_FALSE(in_snapshot);
        ASSERT_EQ(batch.sequence(), at + 1) << "deltas must not skip";
        at = batch.sequence();
        break;
      case v1::ChangeBatch::SNAPSHOT_BEGIN:
        ASSERT_FALSE(in_snapshot);
        ASSERT_GT(batch.sequence(), at + 1) << "a snapshot only for a gap";
        new_snapshots = true;
        in_snapshot = true;
        rows.clear();
        break;
      case v1::ChangeBatch::SNAPSHOT_END:
        in_snapshot = false;
        at = batch.sequence();
        break;
      default:
        break;
    }
    for (const v1::TableBatch& table : batch.rows()) {
      for (int i = 0; i < table.keys_size(); ++i) {
        rows[table.keys(i)] = table.values(i * kDim);
      }
    }
  }
  EXPECT_TRUE(new_snapshots);
  EXPECT_EQ(rows.size(), size_t{kPushes} * 4096 + 1);
  EXPECT_EQ(rows[7], -1.0f);
}

class SubscriberLimitTest : public SubscribeTest {
 protected:
  void Configure(ShardServiceOptions& options) const override {
    options.max_subscribers = 1;
    options.subscriber_stall_timeout = absl::Seconds(1);
  }

  // Whether a new stream is accepted (its snapshot begins) within `timeout`.
  bool AcceptedWithin(absl::Duration timeout) {
    return testing::WaitUntil(
        [&] {
          v1::ChangeBatch batch;
          grpc::ClientReader<v1::ChangeBatch>* reader = Subscribe(0, 0);
          const bool accepted = reader->Read(&batch);
          contexts_.back()->TryCancel();
          return accepted && batch.kind() == v1::ChangeBatch::SNAPSHOT_BEGIN;
        },
        timeout, absl::Milliseconds(100));
  }
};

TEST_F(SubscriberLimitTest, StreamsPastTheLimitAreResourceExhausted) {
  grpc::ClientReader<v1::ChangeBatch>* first = Subscribe(0, 0);
  EXPECT_EQ(Next(first).kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  grpc::ClientReader<v1::ChangeBatch>* second = Subscribe(0, 0);
  v1::ChangeBatch batch;
  EXPECT_FALSE(second->Read(&batch));
  const grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("max_subscribers"));
  // The slot comes back when the first stream ends.
  contexts_.front()->TryCancel();
  EXPECT_TRUE(AcceptedWithin(absl::Seconds(10)));
}

TEST_F(SubscriberLimitTest, AFollowerThatStopsReadingIsCutOffAndFreesItsSlot) {
  // A snapshot far larger than what flow control and the sockets buffer.
  for (uint64_t first = 0; first < 600000; first += 200000) {
    std::vector<uint64_t> keys(200000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = first + i;
    Push("a", keys, 0.25f);
  }
  grpc::ClientReader<v1::ChangeBatch>* stalled = Subscribe(0, 0);
  // Holding the one slot (its snapshot began), it reads nothing more; after
  // the stall timeout the shard ends it.
  EXPECT_EQ(Next(stalled).kind(), v1::ChangeBatch::SNAPSHOT_BEGIN);
  EXPECT_TRUE(AcceptedWithin(absl::Seconds(15)));
  v1::ChangeBatch batch;
  while (stalled->Read(&batch)) {
  }
  // Cut off with the write in flight: the follower sees CANCELLED (the
  // shard logs why).
  EXPECT_EQ(stalled->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// What four stalled snapshots may add to resident memory (see below).
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kStalledGrowthBoundMiB = 128;
#else
constexpr uint64_t kStalledGrowthBoundMiB = 48;
#endif

class StalledSnapshotMemoryTest : public SubscribeTest {
 protected:
  void Configure(ShardServiceOptions& options) const override {
    options.max_subscribers = 8;
  }
};

// Followers that stop reading in the middle of their snapshot cost the shard
// the chunks in flight, not a copy of the tables each.
TEST_F(StalledSnapshotMemoryTest, StalledSnapshotsHoldChunksNotCopies) {
  constexpr uint32_t kWideDim = 64;
  constexpr uint64_t kRows = 262144;  // 64 MiB of values
  {
    grpc::ClientContext context;
    v1::CreateTableRequest request;
    *request.mutable_config() = SgdTable("wide");
    request.mutable_config()->set_dim(kWideDim);
    v1::CreateTableResponse response;
    ASSERT_TRUE(stub_->CreateTable(&context, request, &response).ok());
  }
  for (uint64_t first = 0; first < kRows; first += 8192) {
    grpc::ClientContext context;
    v1::PushRequest request;
    v1::TableBatch* batch = request.add_batches();
    batch->set_table("wide");
    for (uint64_t key = first; key < first + 8192; ++key) {
      batch->add_keys(key);
    }
    batch->mutable_values()->Resize(8192 * kWideDim, 0.5f);
    v1::PushResponse response;
    ASSERT_TRUE(stub_->Push(&context, request, &response).ok());
  }
  // The rows are in the push log and in memory; their first write to
  // RocksDB's memtables (which a snapshot's flush would make) is not what
  // this test measures.
  ASSERT_THAT(store_->Flush(), IsOk());
  absl::StatusOr<uint64_t> before = testing::ResidentMiB(getpid(), "VmRSS");
  ASSERT_THAT(before, IsOk());
  constexpr int kStalled = 4;
  for (int i = 0; i < kStalled; ++i) {
    // Each reads its snapshot's first batch (the snapshot is open by then),
    // then nothing more.
    EXPECT_EQ(Next(Subscribe(0, 0, {"wide"})).kind(),
              v1::ChangeBatch::SNAPSHOT_BEGIN);
  }
  // Once the shard's producers are blocked on the stalled streams, memory
  // stops growing.
  uint64_t after = *before;
  uint64_t previous = 0;
  testing::WaitUntil(
      [&] {
        previous = after;
        after = testing::ResidentMiB(getpid(), "VmRSS").value_or(after);
        return after <= previous + 1;
      },
      absl::Seconds(10), absl::Milliseconds(300));
  // A copy per stream would be 4 x 64 MiB. ASan keeps freed memory in its
  // quarantine (and pads every allocation), so resident memory there also
  // holds what the streams' chunks freed: a looser bound, still far under
  // the copies'.
  EXPECT_LT(after - std::min(after, *before), kStalledGrowthBoundMiB)
      << "resident memory went from " << *before << " to " << after << " MiB";
}

}  // namespace
}  // namespace strata
