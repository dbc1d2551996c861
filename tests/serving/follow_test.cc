// strata-serving following two real training shards on loopback: what it
// serves equals what training holds, and what it refuses.

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp16.h"
#include "common/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::MetricsPort;
using ::strata::testing::SampleValue;
using ::strata::testing::ServingTestCluster;
using ::strata::testing::SgdTable;
using ::strata::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::Ge;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint32_t kUserDim = 8;
constexpr uint32_t kItemDim = 3;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

// Pushes `batches` random batches to each table and returns the keys
// touched, per table.
std::vector<std::vector<uint64_t>> PushRandomBatches(PsClient& client,
                                                     int batches) {
  std::mt19937_64 random(5);
  std::uniform_int_distribution<uint64_t> key(0, 3000);
  std::uniform_real_distribution<float> gradient(-1.0f, 1.0f);
  std::vector<std::set<uint64_t>> touched(2);
  for (int b = 0; b < batches; ++b) {
    for (int t = 0; t < 2; ++t) {
      const uint32_t dim = t == 0 ? kUserDim : kItemDim;
      std::vector<uint64_t> keys(48);
      for (uint64_t& k : keys) k = key(random);
      std::vector<float> gradients(keys.size() * dim);
      for (float& g : gradients) g = gradient(random);
      EXPECT_THAT(client.Push(t == 0 ? "user" : "item", keys, gradients),
                  IsOk());
      touched[t].insert(keys.begin(), keys.end());
    }
  }
  return {{touched[0].begin(), touched[0].end()},
          {touched[1].begin(), touched[1].end()}};
}

class FollowTest : public ::testing::Test {
 protected:
  FollowTest() : cluster_(2) {}

  // Every touched row, looked up on serving, equals training's.
  void ExpectServingEqualsTraining(
      const std::vector<std::vector<uint64_t>>& touched) {
    for (int t = 0; t < 2; ++t) {
      const std::string table = t == 0 ? "user" : "item";
      const uint32_t dim = t == 0 ? kUserDim : kItemDim;
      absl::StatusOr<std::vector<float>> training =
          cluster_.Pull(table, touched[t], dim);
      absl::StatusOr<std::vector<float>> serving =
          cluster_.Lookup(table, touched[t], dim);
      ASSERT_THAT(training, IsOk());
      ASSERT_THAT(serving, IsOk());
      EXPECT_THAT(*serving, ElementsAreArray(*training)) << table;
    }
  }

  ServingTestCluster cluster_;
};

TEST_F(FollowTest, ServingEqualsTrainingByDeltasAndBySnapshot) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("user", kUserDim)),
              IsOk());
  // Serving follows from the start: the pushes reach it as deltas.
  ASSERT_THAT(cluster_.StartServing({"--metrics_port=0"}), IsOk());
  v1::TableConfig item = SgdTable("item", kItemDim);
  item.mutable_optimizer()->set_type(v1::ADAGRAD);
  item.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_THAT(cluster_.training().CreateTable(item), IsOk());
  const std::vector<std::vector<uint64_t>> touched =
      PushRandomBatches(cluster_.training(), 60);

  absl::StatusOr<v1::ServingStatusResponse> status =
      cluster_.WaitUntilCaughtUp();
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->mode(), "follow");
  ASSERT_EQ(status->shards_size(), 2);
  for (const v1::FollowedShard& shard : status->shards()) {
    EXPECT_TRUE(shard.connected());
    EXPECT_EQ(shard.address(), cluster_.shard(shard.shard_index()).address());
    EXPECT_EQ(shard.applied_sequence(), shard.latest_sequence());
    EXPECT_GT(shard.applied_sequence(), 50u);
    EXPECT_EQ(shard.lag_seconds(), 0.0);
  }
  ASSERT_EQ(status->tables_size(), 2);
  for (const v1::TableInfo& info : status->tables()) {
    const size_t t = info.config().name() == "user" ? 0 : 1;
    EXPECT_EQ(info.num_rows(), touched[t].size()) << info.config().name();
  }
  ExpectServingEqualsTraining(touched);

  absl::StatusOr<int> metrics_port = MetricsPort(cluster_.serving());
  ASSERT_THAT(metrics_port, IsOk());
  EXPECT_THAT(HttpGet(*metrics_port, "/healthz"), IsOkAndHolds("ok\n"));
  absl::StatusOr<std::string> metrics = HttpGet(*metrics_port, "/metrics");
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(
      SampleValue(*metrics, "strata_serving_shard_connected{shard=\"1\"}"),
      IsOkAndHolds(1));
  EXPECT_THAT(
      SampleValue(*metrics, "strata_serving_table_rows{table=\"user\"}"),
      IsOkAndHolds(touched[0].size()));
  // Every key looked up went through the row cache, which holds some rows.
  absl::StatusOr<double> keys =
      SampleValue(*metrics, "strata_serving_keys_total");
  absl::StatusOr<double> hits =
      SampleValue(*metrics, "strata_serving_row_cache_hits_total");
  absl::StatusOr<double> misses =
      SampleValue(*metrics, "strata_serving_row_cache_misses_total");
  ASSERT_THAT(keys, IsOk());
  ASSERT_THAT(hits, IsOk());
  ASSERT_THAT(misses, IsOk());
  EXPECT_GT(*keys, 0);
  EXPECT_EQ(*hits + *misses, *keys);
  absl::StatusOr<double> cached =
      SampleValue(*metrics, "strata_serving_row_cache_rows");
  ASSERT_THAT(cached, IsOk());
  EXPECT_GT(*cached, 0);
  EXPECT_THAT(SampleValue(*metrics, "strata_serving_row_cache_capacity_rows"),
              IsOkAndHolds(Ge(*cached)));
  // Each push applied after the first snapshot was timed, from its
  // acknowledgement on the shard to its visibility here.
  absl::StatusOr<double> timed = SampleValue(
      *metrics, "strata_serving_freshness_seconds_count{shard=\"0\"}");
  absl::StatusOr<double> updates =
      SampleValue(*metrics, "strata_serving_shard_updates_total{shard=\"0\"}");
  ASSERT_THAT(timed, IsOk());
  ASSERT_THAT(updates, IsOk());
  EXPECT_GT(*timed, 50);
  EXPECT_LE(*timed, *updates);
  // Every lookup answered went into the latency histogram of Lookup.
  absl::StatusOr<double> lookups = SampleValue(
      *metrics, "strata_serving_requests_total{method=\"Lookup\",code=\"OK\"}");
  ASSERT_THAT(lookups, IsOk());
  EXPECT_GT(*lookups, 0);
  EXPECT_THAT(SampleValue(*metrics,
                          "strata_serving_request_duration_seconds_count{"
                          "method=\"Lookup\"}"),
              IsOkAndHolds(*lookups));
  EXPECT_THAT(*metrics,
              HasSubstr("strata_build_info{program=\"strata-serving\""));
  EXPECT_THAT(SampleValue(*metrics, "process_cpu_seconds_total"),
              IsOkAndHolds(Gt(0)));
  EXPECT_THAT(testing::FamiliesWithoutHelp(*metrics), IsEmpty());

  // SIGTERM stops it cleanly; a new serving on an empty store gets the same
  // rows by snapshot.
  absl::StatusOr<testing::ProcessExit> exit = cluster_.serving().Terminate();
  ASSERT_THAT(exit, IsOk());
  EXPECT_EQ(exit->exit_code, 0) << *exit;
  ASSERT_THAT(cluster_.StartServing({"--cache_rows=16"}), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  EXPECT_THAT(cluster_.serving().log(), HasSubstr("shard 1: snapshot at"));
  ExpectServingEqualsTraining(touched);
}

TEST_F(FollowTest, AnAnswerPastTheMessageLimitIsRefusedBeforeItIsBuilt) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("wide", 4096)), IsOk());
  ASSERT_THAT(cluster_.StartServing(), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  auto stub = v1::ServingService::NewStub(grpc::CreateChannel(
      cluster_.serving().address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  // 0.6 MB of keys asking for 1 GiB of values.
  v1::LookupRequest request;
  request.set_table("wide");
  for (uint64_t key = 0; key < 65536; ++key) request.add_keys(key);
  v1::LookupResponse response;
  EXPECT_THAT(FromGrpcStatus(stub->Lookup(&context, request, &response)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("over the limit")));
  absl::StatusOr<uint64_t> peak =
      testing::ResidentMiB(cluster_.serving().pid(), "VmHWM");
  ASSERT_THAT(peak.status(), IsOk());
  EXPECT_LT(*peak, 256u);
}

// A client that asks for half floats gets each value rounded to the
// nearest half, as FloatToHalf rounds it; an encoding the server does not
// know is refused, naming it.
TEST_F(FollowTest, Fp16LookupsAreTheRowsRoundedToHalves) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("user", kUserDim)),
              IsOk());
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("item", kItemDim)),
              IsOk());
  ASSERT_THAT(cluster_.StartServing(), IsOk());
  const std::vector<uint64_t> keys =
      PushRandomBatches(cluster_.training(), 4)[0];
  const absl::StatusOr<std::vector<float>> trained =
      cluster_.Pull("user", keys, kUserDim);
  ASSERT_THAT(trained.status(), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());

  ServingClientOptions options;
  options.endpoints = {cluster_.serving().address()};
  options.fp16_values = true;
  absl::StatusOr<std::unique_ptr<ServingClient>> client =
      ServingClient::Create(options);
  ASSERT_THAT(client.status(), IsOk());
  std::vector<float> rows(keys.size() * kUserDim);
  ASSERT_THAT((*client)->Lookup("user", keys, absl::MakeSpan(rows)), IsOk());
  size_t inexact = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i], HalfToFloat(FloatToHalf((*trained)[i]))) << i;
    inexact += rows[i] != (*trained)[i] ? 1 : 0;
  }
  // Trained values are seldom halves: the answer was rounded.
  EXPECT_GT(inexact, rows.size() / 2);

  auto stub = v1::ServingService::NewStub(grpc::CreateChannel(
      cluster_.serving().address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::LookupRequest request;
  request.set_table("user");
  request.add_keys(1);
  request.set_encoding(static_cast<v1::ValueEncoding>(7));
  v1::LookupResponse response;
  EXPECT_THAT(FromGrpcStatus(stub->Lookup(&context, request, &response)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("value encoding 7")));
}

// The shard map says 2 shards and names no addresses: the missing shard's
// rows would never be served, which every followed shard's error says.
TEST_F(FollowTest, AShortShardListIsShownAsTheFollowedShardsError) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  ASSERT_THAT(cluster_.StartServing({"--shards=" + cluster_.shard(0).address(),
                                     "--shard_map_check_s=0.1"}),
              IsOk());
  absl::StatusOr<v1::ServingStatusResponse> status =
      cluster_.WaitForStatus([](const v1::ServingStatusResponse& status) {
        return status.shards_size() == 1 &&
               absl::StrContains(status.shards(0).last_error(),
                                 "--shards listing all 2");
      });
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->shards(0).last_error(), HasSubstr("has 2 shards"));
  EXPECT_THAT(cluster_.serving().log(), HasSubstr("--shards listing all 2"));
}

TEST_F(FollowTest, BadRequestsAreRefused) {
  ASSERT_THAT(cluster_.StartTraining(), IsOk());
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("user", kUserDim)),
              IsOk());
  ASSERT_THAT(cluster_.StartServing({"--max_keys_per_request=100"}), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());

  std::vector<float> row(kUserDim);
  const std::vector<uint64_t> one = {1};
  EXPECT_THAT(cluster_.client().Lookup("nope", one, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(cluster_.client().Lookup("user", {}, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A wrong dimension is caught by the client.
  std::vector<float> short_row(kUserDim - 1);
  EXPECT_THAT(cluster_.client().Lookup("user", one, absl::MakeSpan(short_row)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<uint64_t> many(101, 7);
  std::vector<float> rows(many.size() * kUserDim);
  EXPECT_THAT(cluster_.client().Lookup("user", many, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--max_keys_per_request")));

  // An empty request, straight to the server (the client refuses it).
  auto channel = grpc::CreateChannel(cluster_.serving().address(),
                                     grpc::InsecureChannelCredentials());
  {
    auto stub = v1::ServingService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::LookupRequest request;
    request.set_table("user");
    v1::LookupResponse response;
    EXPECT_THAT(FromGrpcStatus(stub->Lookup(&context, request, &response)),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // The serving port has no training service: writes are unimplemented.
  {
    auto stub = v1::ParameterServer::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::PushRequest request;
    v1::TableBatch* batch = request.add_batches();
    batch->set_table("user");
    batch->add_keys(1);
    batch->mutable_values()->Resize(kUserDim, 1.0f);
    v1::PushResponse response;
    EXPECT_THAT(FromGrpcStatus(stub->Push(&context, request, &response)),
                StatusIs(absl::StatusCode::kUnimplemented));
  }

  // On a training shard, a sequence past the latest of its incarnation.
  absl::StatusOr<std::vector<testing::StreamPosition>> positions =
      cluster_.TrainingPositions();
  ASSERT_THAT(positions, IsOk());
  auto shard = v1::ParameterServer::NewStub(grpc::CreateChannel(
      cluster_.shard(0).address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::SubscribeRequest request;
  request.set_incarnation((*positions)[0].incarnation);
  request.set_from_sequence((*positions)[0].sequence + 1000);
  auto reader = shard->Subscribe(&context, request);
  v1::ChangeBatch batch;
  EXPECT_FALSE(reader->Read(&batch));
  EXPECT_THAT(FromGrpcStatus(reader->Finish()),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(ServingBinaryTest, BadFlagsAreUsageErrorsAndAMissingCheckpointFails) {
  struct Case {
    std::vector<std::string> flags;
    int exit_code;
  };
  const Case cases[] = {
      {{}, 2},  // Neither --shards nor --checkpoint_dirs.
      {{"--shards=127.0.0.1:1", "--checkpoint_dirs=/nonexistent"}, 2},
      {{"--shards=127.0.0.1:1", "--unknown_keys=random"}, 2},
      {{"--shards=127.0.0.1:1", "--cache_rows=-1"}, 2},
      {{"--shards=127.0.0.1:1", "--no_such_flag=1"}, 2},
      {{"--checkpoint_dirs=/nonexistent/checkpoints/x"}, 1},
  };
  for (const Case& c : cases) {
    testing::ServerProcessOptions options;
    options.binary = "strata-serving";
    options.flags = c.flags;
    testing::ServerProcess serving(options);
    absl::StatusOr<testing::ProcessExit> exit = serving.RunUntilExit();
    ASSERT_THAT(exit, IsOk());
    EXPECT_EQ(exit->exit_code, c.exit_code)
        << absl::StrJoin(c.flags, " ") << "\n"
        << serving.log();
  }
  testing::ServerProcessOptions no_dir;
  no_dir.binary = "strata-serving";
  no_dir.pass_data_dir = false;
  no_dir.flags = {"--shards=127.0.0.1:1"};
  testing::ServerProcess serving(no_dir);
  absl::StatusOr<testing::ProcessExit> exit = serving.RunUntilExit();
  ASSERT_THAT(exit, IsOk());
  EXPECT_EQ(exit->exit_code, 2);
  EXPECT_THAT(serving.log(), HasSubstr("--data_dir"));
}

}  // namespace
}  // namespace strata
