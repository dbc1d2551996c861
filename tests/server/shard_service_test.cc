// ShardService behind a real loopback gRPC server, with a real RocksDB-backed
// EmbeddingStore, called through the generated stub: what a client sees.

#include "server/shard_service.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/fp16.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

constexpr char kTable[] = "emb";
constexpr uint32_t kDim = 4;
constexpr uint32_t kNumShards = 2;
constexpr uint64_t kMaxKeys = 64;

// `n` keys of `table` that the default shard map gives to `shard`.
std::vector<uint64_t> KeysOwnedBy(absl::string_view table, uint32_t shard,
                                  size_t n, uint64_t first = 1) {
  const uint64_t table_hash = HashString(table);
  std::vector<uint64_t> keys;
  for (uint64_t key = first; keys.size() < n; ++key) {
    if (DefaultBucketOwner(BucketOf(table_hash, key), kNumShards) == shard) {
      keys.push_back(key);
    }
  }
  return keys;
}

v1::TableConfig SgdTableConfig() {
  v1::TableConfig config;
  config.set_name(kTable);
  config.set_dim(kDim);
  config.set_seed(7);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-1.0f);
  config.mutable_initializer()->set_max(1.0f);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

void AddBatch(v1::PushRequest& request, absl::string_view table,
              const std::vector<uint64_t>& keys,
              const std::vector<float>& gradients) {
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(std::string(table));
  batch->mutable_keys()->Add(keys.begin(), keys.end());
  batch->mutable_values()->Add(gradients.begin(), gradients.end());
}

std::string ToHalfBytes(const std::vector<float>& values) {
  std::vector<uint16_t> halves(values.size());
  FloatsToHalves(values.data(), values.size(), halves.data());
  return std::string(reinterpret_cast<const char*>(halves.data()),
                     halves.size() * sizeof(uint16_t));
}

std::vector<float> FromHalfBytes(const std::string& bytes) {
  std::vector<uint16_t> halves(bytes.size() / sizeof(uint16_t));
  std::memcpy(halves.data(), bytes.data(), halves.size() * sizeof(uint16_t));
  std::vector<float> values(halves.size());
  HalvesToFloats(halves.data(), halves.size(), values.data());
  return values;
}

class ShardServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EmbeddingStoreOptions store_options;
    store_options.data_dir = dir_.path() + "/data";
    STRATA_ASSERT_OK_AND_ASSIGN(store_, EmbeddingStore::Open(store_options));
    ShardServiceOptions options;
    options.store = store_.get();
    options.shard_index = 0;
    options.num_shards = kNumShards;
    options.max_keys_per_request = kMaxKeys;
    service_ = std::make_unique<ShardService>(options);

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::ParameterServer::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));

    v1::CreateTableResponse created;
    ASSERT_THAT(CreateTable(SgdTableConfig(), &created), IsOk());
    ASSERT_TRUE(created.created());

    // Trained rows (stored) and fresh ones (computed by the initializer),
    // all owned by this shard: a rejected request must change neither.
    trained_ = KeysOwnedBy(kTable, 0, 6);
    fresh_ = KeysOwnedBy(kTable, 0, 4, /*first=*/100000);
    v1::PushRequest push;
    AddBatch(push, kTable, trained_,
             std::vector<float>(trained_.size() * kDim, 0.25f));
    ASSERT_THAT(Push(push), IsOk());
    watched_ = trained_;
    watched_.insert(watched_.end(), fresh_.begin(), fresh_.end());
    STRATA_ASSERT_OK_AND_ASSIGN(rows_before_, PullRows(watched_));
    rows_stored_before_ = StoredRows();
    ASSERT_EQ(rows_stored_before_, trained_.size());
  }

  static std::chrono::system_clock::time_point Deadline() {
    return std::chrono::system_clock::now() + std::chrono::seconds(10);
  }

  absl::Status CreateTable(const v1::TableConfig& config,
                           v1::CreateTableResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateTableRequest request;
    *request.mutable_config() = config;
    return FromGrpcStatus(stub_->CreateTable(&context, request, response));
  }

  absl::Status Pull(const v1::PullRequest& request,
                    v1::PullResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return FromGrpcStatus(stub_->Pull(&context, request, response));
  }

  absl::Status Push(const v1::PushRequest& request,
                    v1::PushResponse* response = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::PushResponse ignored;
    return FromGrpcStatus(
        stub_->Push(&context, request, response ? response : &ignored));
  }

  absl::StatusOr<v1::StatsResponse> Stats() {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::StatsResponse response;
    absl::Status status =
        FromGrpcStatus(stub_->Stats(&context, v1::StatsRequest(), &response));
    if (!status.ok()) return status;
    return response;
  }

  absl::StatusOr<std::vector<float>> PullRows(
      const std::vector<uint64_t>& keys,
      v1::ValueEncoding encoding = v1::FLOAT32) {
    v1::PullRequest request;
    request.set_encoding(encoding);
    v1::TableBatch* batch = request.add_batches();
    batch->set_table(kTable);
    batch->mutable_keys()->Add(keys.begin(), keys.end());
    v1::PullResponse response;
    absl::Status status = Pull(request, &response);
    if (!status.ok()) return status;
    if (response.batches_size() != 1) {
      return absl::InternalError(
          absl::StrCat(response.batches_size(), " batches in the answer"));
    }
    if (encoding == v1::FLOAT16) {
      return FromHalfBytes(response.batches(0).values_fp16());
    }
    return std::vector<float>(response.batches(0).values().begin(),
                              response.batches(0).values().end());
  }

  // Rows stored in the table, by Stats; 0 on error (after failing the test).
  uint64_t StoredRows() {
    absl::StatusOr<v1::StatsResponse> stats = Stats();
    EXPECT_THAT(stats, IsOk());
    if (!stats.ok() || stats->tables_size() != 1) return 0;
    return stats->tables(0).num_rows();
  }

  // The server still answers, and the watched rows and the row count are
  // what SetUp left.
  void ExpectNothingChanged() {
    absl::StatusOr<std::vector<float>> rows = PullRows(watched_);
    ASSERT_THAT(rows, IsOk()) << "the server no longer answers";
    EXPECT_THAT(*rows, ElementsAreArray(rows_before_));
    EXPECT_EQ(StoredRows(), rows_stored_before_);
  }

  // A valid batch first, so that rejecting the request must undo nothing:
  // nothing of it may be applied.
  v1::PushRequest ValidPushThen() {
    v1::PushRequest request;
    AddBatch(request, kTable, trained_,
             std::vector<float>(trained_.size() * kDim, 1.0f));
    return request;
  }

  strata::testing::TempDir dir_{"shard_service_test"};
  std::unique_ptr<EmbeddingStore> store_;
  std::unique_ptr<ShardService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::vector<uint64_t> trained_, fresh_, watched_;
  std::vector<float> rows_before_;
  uint64_t rows_stored_before_ = 0;
};

TEST_F(ShardServiceTest, PushToUnknownTableIsNotFoundAndChangesNothing) {
  v1::PushRequest request = ValidPushThen();
  AddBatch(request, "no_such_table", KeysOwnedBy("no_such_table", 0, 2),
           std::vector<float>(2 * kDim, 1.0f));
  EXPECT_THAT(Push(request), StatusIs(absl::StatusCode::kNotFound,
                                      HasSubstr("no_such_table")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PullOfUnknownTableIsNotFound) {
  v1::PullRequest request;
  v1::TableBatch* batch = request.add_batches();
  batch->set_table("no_such_table");
  for (uint64_t key : KeysOwnedBy("no_such_table", 0, 2)) batch->add_keys(key);
  v1::PullResponse response;
  EXPECT_THAT(Pull(request, &response), StatusIs(absl::StatusCode::kNotFound,
                                                 HasSubstr("no_such_table")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PushWithTooFewGradientsForDimIsInvalidArgument) {
  v1::PushRequest request = ValidPushThen();
  AddBatch(request, kTable, fresh_,
           std::vector<float>(fresh_.size() * kDim - 1, 1.0f));
  EXPECT_THAT(Push(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(kTable), HasSubstr("dimension 4"),
                             HasSubstr(absl::StrCat(fresh_.size() * kDim - 1,
                                                    " gradient values")))));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PushWithTooManyGradientsForDimIsInvalidArgument) {
  v1::PushRequest request = ValidPushThen();
  // Right for dimension 8, wrong for this table's 4.
  AddBatch(request, kTable, fresh_,
           std::vector<float>(fresh_.size() * 2 * kDim, 1.0f));
  EXPECT_THAT(Push(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("dimension 4")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PushOfNanGradientIsInvalidArgument) {
  v1::PushRequest request = ValidPushThen();
  std::vector<float> gradients(fresh_.size() * kDim, 1.0f);
  gradients[kDim + 2] = std::numeric_limits<float>::quiet_NaN();
  AddBatch(request, kTable, fresh_, gradients);
  EXPECT_THAT(Push(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("non-finite"),
                             HasSubstr(absl::StrCat("key ", fresh_[1])))));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PushOfInfiniteGradientIsInvalidArgument) {
  for (float bad : {std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    v1::PushRequest request = ValidPushThen();
    std::vector<float> gradients(fresh_.size() * kDim, 1.0f);
    gradients.back() = bad;
    AddBatch(request, kTable, fresh_, gradients);
    EXPECT_THAT(Push(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("non-finite")))
        << bad;
    ExpectNothingChanged();
  }
}

TEST_F(ShardServiceTest, Fp16PushOfNanGradientIsInvalidArgument) {
  v1::PushRequest request;
  request.set_encoding(v1::FLOAT16);
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(fresh_.begin(), fresh_.end());
  std::vector<float> gradients(fresh_.size() * kDim, 0.5f);
  gradients[1] = std::numeric_limits<float>::quiet_NaN();
  batch->set_values_fp16(ToHalfBytes(gradients));
  EXPECT_THAT(Push(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("non-finite")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, RequestWithoutBatchesIsInvalidArgument) {
  EXPECT_THAT(Push(v1::PushRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no table batch")));
  v1::PullResponse response;
  EXPECT_THAT(Pull(v1::PullRequest(), &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no table batch")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, BatchWithoutKeysIsInvalidArgument) {
  v1::PushRequest push = ValidPushThen();
  AddBatch(push, kTable, {}, {});
  EXPECT_THAT(Push(push),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("holds no keys"), HasSubstr(kTable))));
  v1::PullRequest pull;
  pull.add_batches()->set_table(kTable);
  v1::PullResponse response;
  EXPECT_THAT(
      Pull(pull, &response),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no keys")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, BatchOverMaxKeysPerRequestIsInvalidArgument) {
  const std::vector<uint64_t> keys = KeysOwnedBy(kTable, 0, kMaxKeys + 1);
  v1::PushRequest push;
  AddBatch(push, kTable, keys, std::vector<float>(keys.size() * kDim, 1.0f));
  EXPECT_THAT(Push(push),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("65 keys"), HasSubstr("maximum of 64"),
                             HasSubstr("--max_keys_per_request"))));
  v1::PullRequest pull;
  v1::TableBatch* batch = pull.add_batches();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(keys.begin(), keys.end());
  v1::PullResponse response;
  EXPECT_THAT(
      Pull(pull, &response),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("maximum of 64")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, MaxKeysPerRequestCountsAllBatches) {
  // 6 trained keys + 59 = 65 keys over two batches, each under the limit.
  const std::vector<uint64_t> keys = KeysOwnedBy(kTable, 0, 59, 200000);
  v1::PushRequest push = ValidPushThen();
  AddBatch(push, kTable, keys, std::vector<float>(keys.size() * kDim, 1.0f));
  EXPECT_THAT(Push(push), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("65 keys")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, RequestOfExactlyMaxKeysIsAccepted) {
  const std::vector<uint64_t> keys = KeysOwnedBy(kTable, 0, kMaxKeys);
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, PullRows(keys));
  EXPECT_THAT(rows, SizeIs(kMaxKeys * kDim));
  v1::PushRequest push;
  AddBatch(push, kTable, keys, std::vector<float>(keys.size() * kDim, 0.0f));
  EXPECT_THAT(Push(push), IsOk());
}

TEST_F(ShardServiceTest, CreateTableWithAnotherConfigIsAlreadyExists) {
  v1::TableConfig other = SgdTableConfig();
  other.set_dim(8);
  v1::CreateTableResponse response;
  EXPECT_THAT(CreateTable(other, &response),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       AllOf(HasSubstr(kTable), HasSubstr("already exists"))));
  other = SgdTableConfig();
  other.mutable_optimizer()->set_learning_rate(0.5f);
  EXPECT_THAT(CreateTable(other, &response),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(kTable)));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, CreateTableWithSameConfigIsOkAndNotCreated) {
  v1::CreateTableResponse response;
  response.set_created(true);
  EXPECT_THAT(CreateTable(SgdTableConfig(), &response), IsOk());
  EXPECT_FALSE(response.created());
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PushOfKeyOwnedByAnotherShardIsFailedPrecondition) {
  const uint64_t foreign = KeysOwnedBy(kTable, 1, 1).front();
  v1::PushRequest request = ValidPushThen();
  AddBatch(request, kTable, {fresh_[0], foreign},
           std::vector<float>(2 * kDim, 1.0f));
  EXPECT_THAT(Push(request),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(absl::StrCat("key ", foreign)),
                             HasSubstr("owned by shard 1"))));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PullOfKeyOwnedByAnotherShardIsFailedPrecondition) {
  const uint64_t foreign = KeysOwnedBy(kTable, 1, 1).front();
  v1::PullRequest request;
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(kTable);
  batch->add_keys(trained_[0]);
  batch->add_keys(foreign);
  v1::PullResponse response;
  EXPECT_THAT(Pull(request, &response),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(absl::StrCat("key ", foreign)),
                             HasSubstr("owned by shard 1"))));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, Fp16PullEqualsFloat32PullRoundedToHalf) {
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> full, PullRows(watched_));
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> half,
                              PullRows(watched_, v1::FLOAT16));
  ASSERT_THAT(half, SizeIs(full.size()));
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(half[i], HalfToFloat(FloatToHalf(full[i]))) << "value " << i;
    EXPECT_NEAR(half[i], full[i], std::fabs(full[i]) / 1024 + 1e-7f);
  }
}

TEST_F(ShardServiceTest, Fp16PushAppliesTheDecodedGradients) {
  // Exactly representable in fp16, so decoding gives these very floats.
  std::vector<float> gradients(fresh_.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) {
    gradients[i] = 0.125f * static_cast<float>(i) - 1.5f;
  }
  v1::PushRequest request;
  request.set_encoding(v1::FLOAT16);
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(fresh_.begin(), fresh_.end());
  batch->set_values_fp16(ToHalfBytes(gradients));
  ASSERT_THAT(Push(request), IsOk());

  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> after, PullRows(fresh_));
  // SGD with learning rate 1 from the rows SetUp pulled.
  const size_t offset = trained_.size() * kDim;
  for (size_t i = 0; i < gradients.size(); ++i) {
    EXPECT_EQ(after[i], rows_before_[offset + i] - gradients[i]) << i;
  }
}

TEST_F(ShardServiceTest, EachPushIsReadAfreshWhateverThePushBeforeHeld) {
  // Request threads parse into messages kept from call to call. Pushes that
  // differ in everything (batches, encoding, client and sequence) follow one
  // another, and each must apply exactly its own gradients: a field left
  // from the push before would show as a duplicate not applied, an error,
  // or a wrong row.
  std::map<uint64_t, std::vector<float>> expected;
  for (size_t k = 0; k < watched_.size(); ++k) {
    expected[watched_[k]].assign(rows_before_.begin() + k * kDim,
                                 rows_before_.begin() + (k + 1) * kDim);
  }
  const auto apply = [&](const std::vector<uint64_t>& keys, float gradient) {
    for (uint64_t key : keys) {
      for (float& value : expected[key]) value -= gradient;  // SGD, rate 1
    }
  };
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    v1::PushRequest both;  // two batches, fp16, deduplicated
    both.set_client_id("worker-a");
    both.set_sequence(round + 1);
    both.set_encoding(v1::FLOAT16);
    for (const std::vector<uint64_t>* keys : {&trained_, &fresh_}) {
      v1::TableBatch* batch = both.add_batches();
      batch->set_table(kTable);
      batch->mutable_keys()->Add(keys->begin(), keys->end());
      batch->set_values_fp16(
          ToHalfBytes(std::vector<float>(keys->size() * kDim, 0.5f)));
    }
    ASSERT_THAT(Push(both), IsOk());
    apply(trained_, 0.5f);
    apply(fresh_, 0.5f);

    v1::PushRequest few;  // one batch of two keys, float32, no client
    const std::vector<uint64_t> two(fresh_.begin(), fresh_.begin() + 2);
    AddBatch(few, kTable, two, std::vector<float>(two.size() * kDim, 0.25f));
    v1::PushResponse response;
    ASSERT_THAT(Push(few, &response), IsOk());
    EXPECT_FALSE(response.duplicate());
    apply(two, 0.25f);

    STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, PullRows(watched_));
    for (size_t k = 0; k < watched_.size(); ++k) {
      ASSERT_THAT(std::vector<float>(rows.begin() + k * kDim,
                                     rows.begin() + (k + 1) * kDim),
                  ElementsAreArray(expected[watched_[k]]))
          << "key " << watched_[k];
    }
  }
}

TEST_F(ShardServiceTest, Fp16PushWithOddByteCountIsInvalidArgument) {
  v1::PushRequest request;
  request.set_encoding(v1::FLOAT16);
  v1::TableBatch* batch = request.add_batches();
  batch->set_table(kTable);
  batch->mutable_keys()->Add(fresh_.begin(), fresh_.end());
  batch->set_values_fp16(
      std::string(fresh_.size() * kDim * sizeof(uint16_t) + 1, '\0'));
  EXPECT_THAT(Push(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("odd number of bytes")));
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, DuplicatePushIsAppliedOnce) {
  v1::PushRequest request;
  request.set_client_id("worker-1");
  request.set_sequence(7);
  AddBatch(request, kTable, fresh_,
           std::vector<float>(fresh_.size() * kDim, 0.5f));
  v1::PushResponse response;
  ASSERT_THAT(Push(request, &response), IsOk());
  EXPECT_FALSE(response.duplicate());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> once, PullRows(fresh_));

  // The retry is acknowledged, flagged, and not applied, even when its
  // gradients differ.
  request.mutable_batches(0)->mutable_values()->Set(0, 100.0f);
  ASSERT_THAT(Push(request, &response), IsOk());
  EXPECT_TRUE(response.duplicate());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> after, PullRows(fresh_));
  EXPECT_THAT(after, ElementsAreArray(once));

  // Another sequence of the same client is applied.
  request.set_sequence(8);
  ASSERT_THAT(Push(request, &response), IsOk());
  EXPECT_FALSE(response.duplicate());
  STRATA_ASSERT_OK_AND_ASSIGN(after, PullRows(fresh_));
  EXPECT_NE(after, once);
}

TEST_F(ShardServiceTest, RejectedPushDoesNotUseUpItsSequence) {
  v1::PushRequest request;
  request.set_client_id("worker-2");
  request.set_sequence(3);
  std::vector<float> gradients(fresh_.size() * kDim, 0.5f);
  gradients[0] = std::numeric_limits<float>::infinity();
  AddBatch(request, kTable, fresh_, gradients);
  ASSERT_THAT(Push(request), StatusIs(absl::StatusCode::kInvalidArgument));

  request.mutable_batches(0)->mutable_values()->Set(0, 0.5f);
  v1::PushResponse response;
  ASSERT_THAT(Push(request, &response), IsOk());
  EXPECT_FALSE(response.duplicate());
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> after, PullRows(fresh_));
  const size_t offset = trained_.size() * kDim;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i], rows_before_[offset + i] - 0.5f) << i;
  }
}

TEST_F(ShardServiceTest, CreateTableWithInvalidConfigIsInvalidArgument) {
  v1::TableConfig config = SgdTableConfig();
  config.set_name("flat");
  config.set_dim(0);
  v1::CreateTableResponse response;
  EXPECT_THAT(CreateTable(config, &response),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim 0")));
  config.set_dim(4);
  config.set_name("no spaces");
  EXPECT_THAT(
      CreateTable(config, &response),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no spaces")));
  STRATA_ASSERT_OK_AND_ASSIGN(v1::StatsResponse stats, Stats());
  EXPECT_EQ(stats.tables_size(), 1);
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, PullOfTwoTablesAnswersEachBatchInOrder) {
  v1::TableConfig wide = SgdTableConfig();
  wide.set_name("wide");
  wide.set_dim(3 * kDim);
  wide.set_seed(8);
  v1::CreateTableResponse created;
  ASSERT_THAT(CreateTable(wide, &created), IsOk());
  const std::vector<uint64_t> wide_keys = KeysOwnedBy("wide", 0, 3);

  v1::PullRequest request;
  v1::TableBatch* first = request.add_batches();
  first->set_table("wide");
  first->mutable_keys()->Add(wide_keys.begin(), wide_keys.end());
  v1::TableBatch* second = request.add_batches();
  second->set_table(kTable);
  second->mutable_keys()->Add(watched_.begin(), watched_.end());
  v1::PullResponse response;
  ASSERT_THAT(Pull(request, &response), IsOk());
  ASSERT_EQ(response.batches_size(), 2);
  EXPECT_EQ(response.batches(0).values_size(), 3 * 3 * kDim);
  EXPECT_THAT(response.batches(1).values(), ElementsAreArray(rows_before_));
}

TEST_F(ShardServiceTest, CheckpointAndRestoreOverRpc) {
  v1::CheckpointRequest checkpoint;
  checkpoint.set_global_step(12);
  v1::CheckpointResponse saved;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_THAT(FromGrpcStatus(stub_->Checkpoint(&context, checkpoint, &saved)),
                IsOk());
  }
  EXPECT_EQ(saved.checkpoint_id(), "step-12");
  EXPECT_EQ(saved.num_rows(), trained_.size());

  v1::PushRequest push;
  AddBatch(push, kTable, watched_,
           std::vector<float>(watched_.size() * kDim, 2.0f));
  ASSERT_THAT(Push(push), IsOk());

  v1::RestoreRequest restore;
  v1::RestoreResponse restored;
  restore.set_checkpoint_id("no-such-checkpoint");
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    EXPECT_THAT(
        FromGrpcStatus(stub_->Restore(&context, restore, &restored)),
        StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-checkpoint")));
  }
  restore.set_checkpoint_id("step-12");
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_THAT(FromGrpcStatus(stub_->Restore(&context, restore, &restored)),
                IsOk());
  }
  EXPECT_EQ(restored.global_step(), 12u);
  ExpectNothingChanged();
}

TEST_F(ShardServiceTest, IncrementalCheckpointOverRpcRestoresItsChain) {
  auto checkpoint = [this](const std::string& id, bool incremental,
                           v1::CheckpointResponse* saved) {
    v1::CheckpointRequest request;
    request.set_checkpoint_id(id);
    request.set_incremental(incremental);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return FromGrpcStatus(stub_->Checkpoint(&context, request, saved));
  };
  auto watched_rows = [this] {
    v1::PullRequest pull;
    v1::TableBatch* batch = pull.add_batches();
    batch->set_table(kTable);
    batch->mutable_keys()->Add(watched_.begin(), watched_.end());
    v1::PullResponse response;
    EXPECT_THAT(Pull(pull, &response), IsOk());
    return std::vector<float>(response.batches(0).values().begin(),
                              response.batches(0).values().end());
  };
  v1::CheckpointResponse saved;
  EXPECT_THAT(checkpoint("d0", true, &saved),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("take a full one")));
  ASSERT_THAT(checkpoint("full", false, &saved), IsOk());
  EXPECT_EQ(saved.parent_id(), "");
  const uint64_t rows = saved.num_rows();

  v1::PushRequest push;
  AddBatch(push, kTable, watched_,
           std::vector<float>(watched_.size() * kDim, 2.0f));
  ASSERT_THAT(Push(push), IsOk());
  const std::vector<float> at_delta = watched_rows();
  ASSERT_THAT(checkpoint("d1", true, &saved), IsOk());
  EXPECT_EQ(saved.parent_id(), "full");
  EXPECT_EQ(saved.delta_rows(), watched_.size());
  EXPECT_GT(saved.num_rows(), rows);  // some watched keys were untrained

  ASSERT_THAT(Push(push), IsOk());
  ASSERT_NE(watched_rows(), at_delta);
  v1::RestoreRequest restore;
  restore.set_checkpoint_id("d1");
  v1::RestoreResponse restored;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  ASSERT_THAT(FromGrpcStatus(stub_->Restore(&context, restore, &restored)),
              IsOk());
  EXPECT_EQ(watched_rows(), at_delta);
}

TEST_F(ShardServiceTest, UnknownValueEncodingIsInvalidArgument) {
  v1::PushRequest push = ValidPushThen();
  push.set_encoding(static_cast<v1::ValueEncoding>(7));
  EXPECT_THAT(Push(push), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("encoding 7")));
  v1::PullRequest pull;
  pull.set_encoding(static_cast<v1::ValueEncoding>(7));
  v1::TableBatch* batch = pull.add_batches();
  batch->set_table(kTable);
  batch->add_keys(trained_[0]);
  v1::PullResponse response;
  EXPECT_THAT(
      Pull(pull, &response),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encoding 7")));
  ExpectNothingChanged();
}

// proto3 makes 0 the sequence of a client that forgets to set one. The
// window once started at floor 0 and took such a push for a retry, so it was
// acknowledged as a duplicate and silently dropped; rejecting or applying it
// are both fine.
TEST_F(ShardServiceTest, PushWithClientIdAndSequenceZeroIsNotDropped) {
  v1::PushRequest request;
  request.set_client_id("forgot-the-sequence");
  AddBatch(request, kTable, fresh_,
           std::vector<float>(fresh_.size() * kDim, 0.5f));
  v1::PushResponse response;
  const absl::Status status = Push(request, &response);
  if (!status.ok()) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("sequence")));
    ExpectNothingChanged();
    return;
  }
  EXPECT_FALSE(response.duplicate())
      << "the first push of a client was taken for a retry";
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<float> after, PullRows(fresh_));
  const size_t offset = trained_.size() * kDim;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i], rows_before_[offset + i] - 0.5f) << i;
  }
}

TEST_F(ShardServiceTest, StatsCountersMove) {
  STRATA_ASSERT_OK_AND_ASSIGN(v1::StatsResponse before, Stats());
  EXPECT_EQ(before.shard_index(), 0u);
  EXPECT_EQ(before.num_shards(), kNumShards);
  EXPECT_EQ(before.durability(), "group");

  ASSERT_THAT(PullRows(fresh_), IsOk());
  v1::PushRequest push;
  push.set_client_id("stats");
  push.set_sequence(1);
  AddBatch(push, kTable, trained_,
           std::vector<float>(trained_.size() * kDim, 0.0f));
  ASSERT_THAT(Push(push), IsOk());
  v1::PushResponse response;
  ASSERT_THAT(Push(push, &response), IsOk());
  ASSERT_TRUE(response.duplicate());
  v1::PullResponse ignored;
  ASSERT_THAT(Pull(v1::PullRequest(), &ignored), Not(IsOk()));

  STRATA_ASSERT_OK_AND_ASSIGN(v1::StatsResponse after, Stats());
  EXPECT_EQ(after.pull_requests(), before.pull_requests() + 2);
  EXPECT_EQ(after.keys_pulled(), before.keys_pulled() + fresh_.size());
  EXPECT_EQ(after.push_requests(), before.push_requests() + 2);
  EXPECT_EQ(after.keys_pushed(), before.keys_pushed() + trained_.size());
  EXPECT_EQ(after.duplicate_pushes(), before.duplicate_pushes() + 1);
  EXPECT_EQ(after.failed_requests(), before.failed_requests() + 1);
  EXPECT_GE(after.uptime_seconds(), before.uptime_seconds());
  ASSERT_EQ(after.tables_size(), 1);
  EXPECT_EQ(after.tables(0).config().name(), kTable);
  EXPECT_EQ(after.tables(0).num_rows(), trained_.size());
}

}  // namespace
}  // namespace strata
