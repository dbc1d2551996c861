// ServingClient against an in-process gRPC server (a fake service at the
// gRPC seam) that refuses every call for overload, as an overloaded
// strata-serving does, or answers each past its deadline, as one whose
// transport has fallen behind does.

#include "client/serving_client.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace {

class RefusingServing final : public v1::ServingService::Service {
 public:
  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest*,
                      v1::LookupResponse*) override {
    ++calls;
    if (past_deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "Deadline Exceeded");
    }
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "overloaded: 4 lookups wait already");
  }
  std::atomic<int> calls{0};
  std::atomic<bool> past_deadline{false};
};

// The calls the client refused itself, by their message.
int CountThrottled(const std::vector<std::string>& errors) {
  int throttled = 0;
  for (const std::string& message : errors) {
    if (message.find("throttled by the client") != std::string::npos) {
      ++throttled;
    }
  }
  return throttled;
}

class ServingClientThrottleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(); }

  // `lookups` calls, each retried for `retry_deadline` (by default one
  // attempt per call); returns their errors' messages.
  std::vector<std::string> LookUp(
      double throttle_k, int lookups,
      absl::StatusCode expected = absl::StatusCode::kResourceExhausted,
      absl::Duration retry_deadline = absl::ZeroDuration()) {
    ServingClientOptions options;
    options.endpoints = {address_};
    options.throttle_k = throttle_k;
    options.retry_deadline = retry_deadline;
    options.initial_backoff = absl::Milliseconds(1);
    options.max_backoff = absl::Milliseconds(2);
    auto client = ServingClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    std::vector<std::string> errors;
    const std::vector<uint64_t> keys = {1, 2, 3};
    std::vector<float> rows(keys.size() * 4);
    for (int i = 0; i < lookups; ++i) {
      absl::Status status = (*client)->Lookup("t", keys, absl::MakeSpan(rows));
      if (status.code() != absl::StatusCode::kResourceExhausted) {
        EXPECT_EQ(status.code(), expected) << status;
      }
      errors.push_back(std::string(status.message()));
    }
    return errors;
  }

  RefusingServing service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(ServingClientThrottleTest, RefusedCallsAreMostlyNotSentAgain) {
  const std::vector<std::string> errors = LookUp(2.0, 200);
  // Nothing is accepted, so after the first few calls nearly every one is
  // refused by the client itself and never reaches the server.
  EXPECT_LT(service_.calls.load(), 40);
  EXPECT_GT(service_.calls.load(), 0);
  EXPECT_EQ(CountThrottled(errors), 200 - service_.calls.load());
}

// A call refused by the throttle ends there. Retried, it drew again every
// few milliseconds until a draw let it through, and nearly every call
// reached the refusing server.
TEST_F(ServingClientThrottleTest, ThrottledCallsAreNotRetried) {
  const std::vector<std::string> errors =
      LookUp(2.0, 20, absl::StatusCode::kResourceExhausted,
             /*retry_deadline=*/absl::Milliseconds(50));
  // Each call retries the server's refusals for 50 ms: about 25 attempts,
  // 500 in all without the throttle.
  EXPECT_LT(service_.calls.load(), 25);
  EXPECT_GT(CountThrottled(errors), 10);
}

TEST_F(ServingClientThrottleTest, CallsPastTheirDeadlineAreNotCountedAccepted) {
  service_.past_deadline = true;
  const std::vector<std::string> errors =
      LookUp(2.0, 200, absl::StatusCode::kDeadlineExceeded);
  // A server whose answers all come too late is overloaded as surely as one
  // that refuses: the client stops sending it most calls.
  EXPECT_LT(service_.calls.load(), 40);
  EXPECT_GT(service_.calls.load(), 0);
  EXPECT_EQ(CountThrottled(errors), 200 - service_.calls.load());
}

TEST_F(ServingClientThrottleTest, WithoutTheThrottleEveryCallIsSent) {
  LookUp(0, 50);
  EXPECT_EQ(service_.calls.load(), 50);
}

}  // namespace
}  // namespace strata
