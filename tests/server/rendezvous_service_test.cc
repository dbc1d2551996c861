// RendezvousService behind a real loopback gRPC server, called through the
// generated stub: what a client sees.

#include "server/rendezvous_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kToken[] = "rendezvous-token";

class RendezvousServiceTest : public ::testing::Test {
 protected:
  // Starts the service with `options` on a free loopback port.
  void Start(const RendezvousServiceOptions& options) {
    service_ = std::make_unique<RendezvousService>(options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Rendezvous::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  absl::Status Set(const std::string& key, const std::string& value,
                   const std::string& token = "") {
    grpc::ClientContext context;
    Prepare(context, token);
    v1::SetValueRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::SetValueResponse response;
    return FromGrpcStatus(stub_->SetValue(&context, request, &response));
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  const std::string& token = "") {
    grpc::ClientContext context;
    Prepare(context, token);
    v1::GetValueRequest request;
    request.set_key(key);
    v1::GetValueResponse response;
    absl::Status status =
        FromGrpcStatus(stub_->GetValue(&context, request, &response));
    if (!status.ok()) return status;
    return response.value();
  }

  // A short deadline: a GetValue that blocked on a missing key would end in
  // DEADLINE_EXCEEDED instead of the NOT_FOUND the tests expect.
  static void Prepare(grpc::ClientContext& context, const std::string& token) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    AddBearerToken(token, context);
  }

  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

TEST_F(RendezvousServiceTest, DefaultLimitsAreTheDocumentedOnes) {
  const RendezvousServiceOptions options;
  EXPECT_EQ(options.max_key_bytes, 256u);
  EXPECT_EQ(options.max_value_bytes, 1u << 20);
  EXPECT_EQ(options.max_keys, 100000u);
  EXPECT_EQ(options.max_total_bytes, 256u << 20);
  EXPECT_TRUE(options.auth_token.empty());
}

TEST_F(RendezvousServiceTest, GetReturnsTheValueSetWithAllItsBytes) {
  Start(RendezvousServiceOptions());
  const std::string value("addr\0\xff\x01 bytes", 14);
  ASSERT_THAT(Set("job-1/0", value), IsOk());
  EXPECT_THAT(Get("job-1/0"), IsOkAndHolds(value));
  EXPECT_EQ(service_->num_keys(), 1u);
}

TEST_F(RendezvousServiceTest, SetReplacesAnEarlierValue) {
  Start(RendezvousServiceOptions());
  ASSERT_THAT(Set("k", "first"), IsOk());
  ASSERT_THAT(Set("k", "second"), IsOk());
  EXPECT_THAT(Get("k"), IsOkAndHolds(std::string("second")));
  EXPECT_EQ(service_->num_keys(), 1u);
}

TEST_F(RendezvousServiceTest, EmptyValueIsAValue) {
  Start(RendezvousServiceOptions());
  ASSERT_THAT(Set("k", ""), IsOk());
  EXPECT_THAT(Get("k"), IsOkAndHolds(std::string()));
}

TEST_F(RendezvousServiceTest, GetOfAnUnsetKeyIsNotFoundAtOnce) {
  Start(RendezvousServiceOptions());
  ASSERT_THAT(Set("job-1/0", "a"), IsOk());
  EXPECT_THAT(Get("job-1/1"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'job-1/1'")));
  EXPECT_EQ(service_->requests(RendezvousService::Method::kGetValue,
                               absl::StatusCode::kNotFound),
            1u);
}

TEST_F(RendezvousServiceTest, EmptyKeyIsInvalid) {
  Start(RendezvousServiceOptions());
  EXPECT_THAT(Set("", "v"), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("key is empty")));
  EXPECT_THAT(Get(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("key is empty")));
}

TEST_F(RendezvousServiceTest, KeyOf256BytesIsAcceptedAnd257IsInvalid) {
  Start(RendezvousServiceOptions());
  const std::string longest(256, 'k');
  ASSERT_THAT(Set(longest, "v"), IsOk());
  EXPECT_THAT(Get(longest), IsOkAndHolds(std::string("v")));
  const std::string too_long(257, 'k');
  EXPECT_THAT(Set(too_long, "v"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("has 257 bytes"),
                                                 HasSubstr("maximum of 256"))));
  EXPECT_THAT(Get(too_long), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("has 257 bytes")));
}

TEST_F(RendezvousServiceTest, ValueOfOneMebibyteIsAcceptedAndOneMoreInvalid) {
  Start(RendezvousServiceOptions());
  const std::string largest(size_t{1} << 20, 'v');
  ASSERT_THAT(Set("big", largest), IsOk());
  EXPECT_THAT(Get("big"), IsOkAndHolds(largest));
  EXPECT_THAT(Set("bigger", largest + "v"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("value of rendezvous key 'bigger'"),
                             HasSubstr("maximum of 1048576"))));
  EXPECT_THAT(Get("bigger"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RendezvousServiceTest, NewKeysBeyondTheMaximumAreResourceExhausted) {
  RendezvousServiceOptions options;
  options.max_keys = 3;
  Start(options);
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(Set(absl::StrCat("k", i), "v"), IsOk());
  }
  EXPECT_THAT(Set("k3", "v"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("maximum of 3 keys"), HasSubstr("k3"))));
  // A key already held may still be replaced.
  EXPECT_THAT(Set("k1", "replaced"), IsOk());
  EXPECT_THAT(Get("k1"), IsOkAndHolds(std::string("replaced")));
  EXPECT_EQ(service_->num_keys(), 3u);
}

TEST_F(RendezvousServiceTest, BytesBeyondTheMaximumAreResourceExhausted) {
  RendezvousServiceOptions options;
  options.max_total_bytes = 100;
  Start(options);
  ASSERT_THAT(Set("a", std::string(60, 'x')), IsOk());  // 61 bytes held.
  EXPECT_THAT(Set("b", std::string(39, 'x')),           // 101 bytes.
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("maximum of 100")));
  ASSERT_THAT(Set("b", std::string(38, 'x')), IsOk());  // 100 bytes.
  // Shrinking a value makes room for another.
  ASSERT_THAT(Set("a", ""), IsOk());  // 40 bytes.
  EXPECT_THAT(Set("c", std::string(59, 'x')), IsOk());
}

TEST_F(RendezvousServiceTest, WithATokenBothMethodsNeedIt) {
  RendezvousServiceOptions options;
  options.auth_token = kToken;
  Start(options);
  EXPECT_THAT(Set("k", "v"), StatusIs(absl::StatusCode::kUnauthenticated,
                                      HasSubstr("SetValue")));
  EXPECT_THAT(Set("k", "v", "wrong"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(service_->num_keys(), 0u);
  ASSERT_THAT(Set("k", "v", kToken), IsOk());
  EXPECT_THAT(Get("k"), StatusIs(absl::StatusCode::kUnauthenticated,
                                 HasSubstr("GetValue")));
  EXPECT_THAT(Get("k", "wrong"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Get("k", kToken), IsOkAndHolds(std::string("v")));
}

TEST_F(RendezvousServiceTest, WithoutATokenConfiguredAnyTokenIsAccepted) {
  Start(RendezvousServiceOptions());
  EXPECT_THAT(Set("k", "v", "whatever"), IsOk());
  EXPECT_THAT(Get("k", "whatever"), IsOkAndHolds(std::string("v")));
}

TEST_F(RendezvousServiceTest, MetricsCountRequestsByMethodAndCode) {
  Start(RendezvousServiceOptions());
  ASSERT_THAT(Set("k", "value"), IsOk());
  ASSERT_THAT(Get("k"), IsOk());
  ASSERT_THAT(Get("missing"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(Get("missing"), StatusIs(absl::StatusCode::kNotFound));
  using Method = RendezvousService::Method;
  EXPECT_EQ(service_->requests(Method::kSetValue, absl::StatusCode::kOk), 1u);
  EXPECT_EQ(service_->requests(Method::kGetValue, absl::StatusCode::kOk), 1u);
  EXPECT_EQ(service_->requests(Method::kGetValue, absl::StatusCode::kNotFound),
            2u);
  MetricFamilies families;
  service_->AddMetrics(&families);
  const std::string text = MetricsText(families);
  EXPECT_THAT(text, HasSubstr("strata_rendezvous_requests_total{method="
                              "\"GetValue\",code=\"NOT_FOUND\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("strata_rendezvous_requests_total{method="
                              "\"SetValue\",code=\"OK\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("strata_rendezvous_keys 1\n"));
  EXPECT_THAT(text, HasSubstr("strata_rendezvous_bytes 6\n"));
}

TEST_F(RendezvousServiceTest, ConcurrentClientsEachReadTheirOwnValues) {
  Start(RendezvousServiceOptions());
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 50;
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &mismatches] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const std::string key = absl::StrCat("t", t, "/", i);
        const std::string value = absl::StrCat("value of ", key);
        absl::StatusOr<std::string> got =
            Set(key, value).ok() ? Get(key) : absl::InternalError("set");
        if (!got.ok() || *got != value) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << t;
  EXPECT_EQ(service_->num_keys(), size_t{kThreads * kKeysPerThread});
}

}  // namespace
}  // namespace strata
