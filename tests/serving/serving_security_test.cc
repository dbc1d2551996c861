// strata-serving with TLS and tokens, as real processes on loopback: it
// follows a secured training shard, and its reads are open or need the
// token as configured.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::strata::testing::TestCerts;
using ::testing::HasSubstr;

constexpr char kToken[] = "training-token";
constexpr char kServingToken[] = "serving-token";

class ServingSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TestCerts> certs = testing::MakeTestCerts(dir_.path());
    ASSERT_THAT(certs.status(), IsOk());
    certs_ = *std::move(certs);
    ASSERT_THAT(testing::WriteTextFile(token_file_, absl::StrCat(kToken, "\n")),
                IsOk());
    ASSERT_THAT(testing::WriteTextFile(serving_token_file_, kServingToken),
                IsOk());
    ServerProcessOptions options;
    options.flags = {"--tls_cert_file=" + certs_.server_cert_file,
                     "--tls_key_file=" + certs_.server_key_file,
                     "--auth_token_file=" + token_file_};
    training_ = std::make_unique<ServerProcess>(options);
    ASSERT_THAT(training_->Start(), IsOk());

    PsClientOptions client_options;
    client_options.shard_addresses = {training_->address()};
    client_options.tls_ca_file = certs_.ca_file;
    client_options.auth_token = kToken;
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(client_options);
    ASSERT_THAT(client.status(), IsOk());
    v1::TableConfig config;
    config.set_name("users");
    config.set_dim(2);
    config.mutable_initializer()->set_type(v1::ZEROS);
    config.mutable_optimizer()->set_type(v1::SGD);
    config.mutable_optimizer()->set_learning_rate(1.0f);
    ASSERT_THAT((*client)->CreateTable(config), IsOk());
    ASSERT_THAT((*client)->Push("users", {5}, {0.5f, -2.0f}), IsOk());
  }

  // strata-serving following the training shard over TLS with its token,
  // itself on TLS with its own token, plus `flags`.
  std::unique_ptr<ServerProcess> StartServing(std::vector<std::string> flags) {
    ServerProcessOptions options;
    options.binary = "strata-serving";
    options.flags = {"--shards=" + training_->address(),
                     "--shard_tls_ca_file=" + certs_.ca_file,
                     "--tls_cert_file=" + certs_.server_cert_file,
                     "--tls_key_file=" + certs_.server_key_file,
                     "--auth_token_file=" + serving_token_file_};
    options.flags.insert(options.flags.end(), flags.begin(), flags.end());
    auto serving = std::make_unique<ServerProcess>(options);
    EXPECT_THAT(serving->Start(), IsOk());
    return serving;
  }

  std::unique_ptr<ServingClient> Client(const ServerProcess& serving,
                                        const std::string& token) {
    ServingClientOptions options;
    options.endpoints = {serving.address()};
    options.tls_ca_file = certs_.ca_file;
    options.auth_token = token;
    options.retry_deadline = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<ServingClient>> client =
        ServingClient::Create(options);
    EXPECT_THAT(client.status(), IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Looks row 5 up until it holds the pushed update (or 20 s pass).
  absl::Status WaitForRow(ServingClient& client) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    std::vector<float> row(2);
    absl::Status status;
    while (absl::Now() < give_up) {
      status = client.Lookup("users", {5}, absl::MakeSpan(row));
      if (status.ok() && row == std::vector<float>{-0.5f, 2.0f}) {
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return status.ok() ? absl::DeadlineExceededError("row 5 never arrived")
                       : status;
  }

  TempDir dir_{"serving-security"};
  std::string token_file_ = dir_.path() + "/token";
  std::string serving_token_file_ = dir_.path() + "/serving-token";
  TestCerts certs_;
  std::unique_ptr<ServerProcess> training_;
};

TEST_F(ServingSecurityTest, FollowsASecuredShardAndReadsAreOpenByDefault) {
  std::unique_ptr<ServerProcess> serving =
      StartServing({"--shard_auth_token_file=" + token_file_});
  ASSERT_TRUE(serving->running());
  EXPECT_THAT(serving->WaitForLog("auth_reads=off"), IsOk());
  std::unique_ptr<ServingClient> anonymous = Client(*serving, "");
  ASSERT_NE(anonymous, nullptr);
  EXPECT_THAT(WaitForRow(*anonymous), IsOk());
  EXPECT_THAT(anonymous->Status().status(), IsOk());
}

TEST_F(ServingSecurityTest, WithAuthReadsLookupNeedsTheToken) {
  std::unique_ptr<ServerProcess> serving =
      StartServing({"--shard_auth_token_file=" + token_file_, "--auth_reads"});
  ASSERT_TRUE(serving->running());
  std::unique_ptr<ServingClient> anonymous = Client(*serving, "");
  std::unique_ptr<ServingClient> wrong = Client(*serving, kToken);
  std::unique_ptr<ServingClient> reader = Client(*serving, kServingToken);
  ASSERT_NE(reader, nullptr);
  EXPECT_THAT(WaitForRow(*reader), IsOk());
  std::vector<float> row(2);
  EXPECT_THAT(
      anonymous->Lookup("users", {5}, absl::MakeSpan(row)),
      StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Lookup")));
  EXPECT_THAT(anonymous->Status().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(wrong->Lookup("users", {5}, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(ServingSecurityTest, WithoutTheShardTokenTheFollowerIsRefused) {
  std::unique_ptr<ServerProcess> serving = StartServing({});
  ASSERT_TRUE(serving->running());
  std::unique_ptr<ServingClient> client = Client(*serving, "");
  ASSERT_NE(client, nullptr);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  std::string last_error;
  while (absl::Now() < give_up && last_error.empty()) {
    absl::StatusOr<v1::ServingStatusResponse> status = client->Status();
    ASSERT_THAT(status.status(), IsOk());
    ASSERT_EQ(status->shards_size(), 1);
    last_error = status->shards(0).last_error();
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(last_error, HasSubstr("Subscribe"));
}

}  // namespace
}  // namespace strata
