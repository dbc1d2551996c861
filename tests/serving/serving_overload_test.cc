// strata-serving refusing what it cannot serve in time: lookups past a
// request thread's share of the queue are refused at once, and those whose
// deadline passed while they waited are dropped unprocessed; Status and the
// health check are answered by the same request threads.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/strata.grpc.pb.h"
#include "tests/serving/serving_test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::MetricsPort;
using ::strata::testing::SampleValue;
using ::strata::testing::ServingTestCluster;
using ::strata::testing::SgdTable;
using ::testing::Ge;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 64;
// The most keys one lookup may carry: tens of milliseconds to serve.
constexpr int kHeavyKeys = 262144;

struct Answer {
  grpc::Status status;
  v1::LookupResponse response;
};

struct Lookup {
  std::string table;
  int keys;
  absl::Duration timeout;
};

// Sends every lookup at once, in order, and waits for all the answers.
std::vector<Answer> LookupAtOnce(v1::ServingService::Stub& stub,
                                 const std::vector<Lookup>& lookups) {
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LookupResponse>> reader;
  };
  grpc::CompletionQueue queue;
  std::vector<Call> calls(lookups.size());
  std::vector<Answer> answers(lookups.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    v1::LookupRequest request;
    request.set_table(lookups[i].table);
    for (int k = 0; k < lookups[i].keys; ++k) {
      request.add_keys(static_cast<uint64_t>(k));
    }
    calls[i].context.set_deadline(
        std::chrono::system_clock::now() +
        absl::ToChronoMilliseconds(lookups[i].timeout));
    calls[i].reader = stub.AsyncLookup(&calls[i].context, request, &queue);
    calls[i].reader->Finish(&answers[i].response, &answers[i].status,
                            reinterpret_cast<void*>(i));
  }
  for (size_t done = 0; done < calls.size(); ++done) {
    void* tag;
    bool ok;
    EXPECT_TRUE(queue.Next(&tag, &ok));
  }
  return answers;
}

double LookupsAnswered(const std::string& metrics, const std::string& code) {
  absl::StatusOr<double> value = SampleValue(
      metrics,
      absl::StrCat("strata_serving_requests_total{method=\"Lookup\",code=\"",
                   code, "\"}"));
  return value.ok() ? *value : 0;
}

class ServingOverloadTest : public ::testing::Test {
 protected:
  ServingOverloadTest() : cluster_(1) {}

  // One request thread waiting on at most `max_queued` lookups.
  void StartServing(int max_queued) {
    ASSERT_THAT(cluster_.StartTraining(), IsOk());
    ASSERT_THAT(cluster_.training().CreateTable(SgdTable("t", kDim)), IsOk());
    ASSERT_THAT(cluster_.StartServing(
                    {"--metrics_port=0", "--request_threads=1",
                     absl::StrCat("--max_queued_requests=", max_queued)}),
                IsOk());
    // Status, served by the request thread, says when the table is there.
    ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  }

  // A connected stub of the serving PS that takes answers of any size.
  std::unique_ptr<v1::ServingService::Stub> Stub() {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(-1);  // A heavy answer is 64 MiB.
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
        cluster_.serving().address(), grpc::InsecureChannelCredentials(),
        arguments);
    EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(10)));
    return v1::ServingService::NewStub(channel);
  }

  std::string Metrics() {
    absl::StatusOr<int> port = MetricsPort(cluster_.serving());
    EXPECT_THAT(port, IsOk());
    absl::StatusOr<std::string> metrics =
        port.ok() ? HttpGet(*port, "/metrics") : port.status();
    EXPECT_THAT(metrics, IsOk());
    return metrics.ok() ? *metrics : "";
  }

  ServingTestCluster cluster_;
};

TEST_F(ServingOverloadTest, RefusesLookupsPastTheQueueAtOnceAndServesTheRest) {
  StartServing(/*max_queued=*/1);
  // One is served, at most one waits; the others arrive while it is full.
  constexpr int kCalls = 8;
  const std::vector<Answer> answers = LookupAtOnce(
      *Stub(),
      std::vector<Lookup>(kCalls, {"t", kHeavyKeys, absl::Seconds(30)}));
  int served = 0;
  int refused = 0;
  for (const Answer& answer : answers) {
    if (answer.status.ok()) {
      ++served;
      EXPECT_EQ(answer.response.values_size(), kHeavyKeys * int{kDim});
      EXPECT_EQ(answer.response.num_missing(), uint32_t{kHeavyKeys});
      continue;
    }
    EXPECT_EQ(answer.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << answer.status.error_message();
    EXPECT_THAT(answer.status.error_message(),
                HasSubstr("overloaded: 1 lookups wait already"));
    ++refused;
  }
  EXPECT_EQ(served + refused, kCalls);
  EXPECT_THAT(served, Ge(1));
  EXPECT_THAT(refused, Ge(kCalls - 3));

  const std::string metrics = Metrics();
  EXPECT_EQ(LookupsAnswered(metrics, "RESOURCE_EXHAUSTED"), refused);
  EXPECT_EQ(LookupsAnswered(metrics, "OK"), served);
  // Only the lookups served were looked up.
  EXPECT_THAT(SampleValue(metrics, "strata_serving_keys_total"),
              ::strata::testing::IsOkAndHolds(static_cast<double>(served) *
                                              kHeavyKeys));
}

TEST_F(ServingOverloadTest, DropsLookupsWhoseDeadlinePassedWhileTheyWaited) {
  StartServing(/*max_queued=*/64);
  // Answers of 64 MiB, tens of milliseconds each to serve. The request
  // thread takes the first alone, and the rest with the light lookups once
  // it is done: those wait behind five heavy ones, past their 150 ms.
  ASSERT_THAT(cluster_.training().CreateTable(SgdTable("wide", 1024)), IsOk());
  ASSERT_THAT(cluster_.WaitUntilCaughtUp(), IsOk());
  constexpr int kWideKeys = 16384;
  constexpr int kHeavy = 6;
  constexpr int kLight = 8;
  const Lookup heavy = {"wide", kWideKeys, absl::Seconds(30)};
  std::vector<Lookup> lookups(kHeavy, heavy);
  lookups.insert(lookups.end(), kLight, {"t", 10, absl::Milliseconds(150)});
  std::unique_ptr<v1::ServingService::Stub> stub = Stub();
  // Once first, so that the connection's flow-control windows have grown
  // and no request is held back.
  ASSERT_TRUE(LookupAtOnce(*stub, {heavy})[0].status.ok());
  const std::vector<Answer> answers = LookupAtOnce(*stub, lookups);
  for (int i = 0; i < kHeavy; ++i) {
    ASSERT_TRUE(answers[i].status.ok()) << answers[i].status.error_message();
  }
  for (int i = kHeavy; i < kHeavy + kLight; ++i) {
    EXPECT_EQ(answers[i].status.error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The server dropped them without looking anything up: it counts them
  // once it has taken them from its queue, after the heavy ones. (A light
  // lookup whose caller gave up before the server read it off the socket,
  // as can happen in a sanitizer build, never reaches the service: gRPC
  // drops it, and it is not counted.)
  std::string metrics = Metrics();
  auto settled = [&](double want_dropped) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while ((LookupsAnswered(metrics, "OK") < kHeavy + 1 ||
            LookupsAnswered(metrics, "DEADLINE_EXCEEDED") < want_dropped) &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
      metrics = Metrics();
    }
  };
  settled(0);
  settled(kLight);
  EXPECT_LE(LookupsAnswered(metrics, "DEADLINE_EXCEEDED"), kLight);
  EXPECT_EQ(LookupsAnswered(metrics, "OK"), kHeavy + 1);
  EXPECT_THAT(SampleValue(metrics, "strata_serving_keys_total"),
              ::strata::testing::IsOkAndHolds((kHeavy + 1) * kWideKeys));
}

TEST_F(ServingOverloadTest, AnswersHealthChecksForTheServerAndItsService) {
  StartServing(/*max_queued=*/4);
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      cluster_.serving().address(), grpc::InsecureChannelCredentials()));
  for (const std::string service : {"", "strata.v1.ServingService"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, request, &response);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING)
        << service;
  }
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("no.such.Service"));
}

}  // namespace
}  // namespace strata
