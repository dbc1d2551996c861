#include "server/internal/reused_request.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {
namespace {

// A push's wire bytes: one batch per entry of `floats_per_batch`, each
// with that many gradients and a key per 64 of them.
std::string PushBytes(std::initializer_list<size_t> floats_per_batch) {
  v1::PushRequest push;
  push.set_client_id("worker-0");
  for (size_t floats : floats_per_batch) {
    v1::TableBatch* batch = push.add_batches();
    batch->set_table("items");
    for (size_t k = 0; k < floats / 64; ++k) batch->add_keys(k * 7919 + 1);
    batch->mutable_values()->Resize(static_cast<int>(floats), 0.5f);
  }
  return push.SerializeAsString();
}

TEST(KeptRequestRoomTest, CountsTheRoomOfKeysAndValues) {
  v1::PushRequest push;
  ASSERT_TRUE(push.ParseFromString(PushBytes({64 * 1000})));
  KeptRequestRoom room;
  ASSERT_TRUE(room.Update(push));
  EXPECT_GE(room.bytes(), 1000 * sizeof(uint64_t) + 64000 * sizeof(float));
  EXPECT_LE(room.bytes(),
            2 * (1000 * sizeof(uint64_t) + 64000 * sizeof(float)));
}

TEST(KeptRequestRoomTest, AClearedBatchKeepsItsRoom) {
  v1::PushRequest push;
  KeptRequestRoom room;
  ASSERT_TRUE(push.ParseFromString(PushBytes({64, 64 * 10000})));
  ASSERT_TRUE(room.Update(push));
  const size_t two_batches = room.bytes();
  // The second batch is cleared, not freed: its buffers still count.
  ASSERT_TRUE(push.ParseFromString(PushBytes({64})));
  ASSERT_TRUE(room.Update(push));
  EXPECT_GE(room.bytes(), 64 * 10000 * sizeof(float));
  EXPECT_EQ(room.bytes(), two_batches);
  room.Reset();
  EXPECT_EQ(room.bytes(), 0u);
}

TEST(KeptRequestRoomTest, CountsAPullsSharedAnswerStrings) {
  v1::PullRequest pull;
  pull.add_batches()->add_keys(3);
  pull.mutable_shared_answer()->set_token(std::string(1 << 20, 't'));
  KeptRequestRoom room;
  ASSERT_TRUE(room.Update(pull));
  EXPECT_GE(room.bytes(), size_t{1} << 20);
}

TEST(KeptRequestRoomTest, RefusesManyBatchesAndUnknownFields) {
  v1::PullRequest pull;
  for (size_t i = 0; i <= KeptRequestRoom::kMaxBatches; ++i) {
    pull.add_batches()->add_keys(i);
  }
  KeptRequestRoom room;
  EXPECT_FALSE(room.Update(pull));

  // Field 99, a varint: unknown to TableBatch.
  v1::PushRequest push;
  std::string batch_bytes = v1::TableBatch().SerializeAsString();
  batch_bytes += std::string("\x98\x06\x01", 3);
  std::string push_bytes = "\x0a";  // batches = 1, length-delimited
  push_bytes += static_cast<char>(batch_bytes.size());
  push_bytes += batch_bytes;
  ASSERT_TRUE(push.ParseFromString(push_bytes));
  ASSERT_EQ(push.batches_size(), 1);
  EXPECT_FALSE(room.Update(push));
}

TEST(ReusedRequestTest, KeepsAMessageUnderTheLimitForTheNextCall) {
  using Reused = ReusedRequest<v1::PushRequest>;
  {
    Reused request;
    ASSERT_TRUE(request.get()->ParseFromString(PushBytes({64 * 4096})));
  }
  EXPECT_GE(Reused::KeptBytes(), 64 * 4096 * sizeof(float));
  Reused next;
  // The same message, its buffers still there for the next parse.
  ASSERT_EQ(next.get()->batches_size(), 1);
  EXPECT_GE(next.get()->batches(0).values().Capacity(), 64 * 4096);
}

TEST(ReusedRequestTest, FreesAMessagePastTheLimit) {
  using Reused = ReusedRequest<v1::PushRequest>;
  const size_t floats = Reused::kMaxKeptRequestBytes / sizeof(float) + 64;
  {
    Reused request;
    ASSERT_TRUE(request.get()->ParseFromString(PushBytes({64, floats})));
  }
  EXPECT_EQ(Reused::KeptBytes(), 0u);
  Reused next;
  EXPECT_EQ(next.get()->batches_size(), 0);
  EXPECT_EQ(next.get()->ByteSizeLong(), 0u);
}

TEST(ReusedRequestTest, ACallWhileTheMessageIsInUseGetsItsOwn) {
  using Reused = ReusedRequest<v1::PullRequest>;
  Reused outer;
  outer.get()->add_batches()->add_keys(1);
  {
    Reused inner;
    EXPECT_NE(inner.get(), outer.get());
    EXPECT_EQ(inner.get()->batches_size(), 0);
  }
  EXPECT_EQ(outer.get()->batches(0).keys(0), 1u);
}

}  // namespace
}  // namespace server_internal
}  // namespace strata
