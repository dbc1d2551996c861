// strata-server with TLS and a bearer token, as real processes on loopback:
// who may write, who may read, who cannot even connect, and how the daemon
// refuses unreadable secrets and warns about an open port.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ProcessExit;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::strata::testing::TestCerts;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "s3cret-token";

v1::TableConfig Table() {
  v1::TableConfig config;
  config.set_name("users");
  config.set_dim(4);
  config.mutable_initializer()->set_type(v1::ZEROS);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("security");
    absl::StatusOr<TestCerts> certs = testing::MakeTestCerts(dir_->path());
    ASSERT_THAT(certs.status(), IsOk());
    certs_ = new TestCerts(*std::move(certs));
    token_file_ = new std::string(dir_->path() + "/token");
    // The trailing newline is stripped when the token is read.
    ASSERT_THAT(
        testing::WriteTextFile(*token_file_, absl::StrCat(kToken, "\n")),
        IsOk());
  }
  static void TearDownTestSuite() {
    delete token_file_;
    delete certs_;
    delete dir_;
  }

  // Flags of a shard with TLS and the token.
  static std::vector<std::string> SecureFlags() {
    return {"--tls_cert_file=" + certs_->server_cert_file,
            "--tls_key_file=" + certs_->server_key_file,
            "--auth_token_file=" + *token_file_};
  }

  static std::unique_ptr<PsClient> Client(const ServerProcess& server,
                                          const std::string& ca_file,
                                          const std::string& token) {
    PsClientOptions options;
    options.shard_addresses = {server.address()};
    options.tls_ca_file = ca_file;
    options.auth_token = token;
    options.rpc_timeout = absl::Seconds(5);
    options.retry_deadline = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client.status(), IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  static TempDir* dir_;
  static TestCerts* certs_;
  static std::string* token_file_;
};

TempDir* SecurityTest::dir_ = nullptr;
TestCerts* SecurityTest::certs_ = nullptr;
std::string* SecurityTest::token_file_ = nullptr;

TEST_F(SecurityTest, WithTheTokenOverTlsEveryCallWorks) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  EXPECT_THAT(server.WaitForLog("tls=on"), IsOk());
  EXPECT_THAT(server.log(), Not(HasSubstr(kToken)));
  std::unique_ptr<PsClient> client = Client(server, certs_->ca_file, kToken);
  ASSERT_NE(client, nullptr);
  ASSERT_THAT(client->CreateTable(Table()), IsOk());
  const std::vector<uint64_t> keys = {1, 2};
  ASSERT_THAT(client->Push("users", keys, std::vector<float>(8, 1.0f)), IsOk());
  std::vector<float> rows(8);
  ASSERT_THAT(client->Pull("users", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(rows, std::vector<float>(8, -1.0f));
  EXPECT_THAT(client->Checkpoint("c1", 1).status(), IsOk());
  EXPECT_THAT(client->Restore("c1").status(), IsOk());
  EXPECT_THAT(client->Stats().status(), IsOk());
  EXPECT_THAT(client->CheckHealth(), IsOk());
}

TEST_F(SecurityTest, WithoutTheTokenWritesAreRefusedAndReadsWork) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<PsClient> admin = Client(server, certs_->ca_file, kToken);
  std::unique_ptr<PsClient> anonymous = Client(server, certs_->ca_file, "");
  ASSERT_NE(admin, nullptr);
  ASSERT_NE(anonymous, nullptr);
  EXPECT_THAT(
      anonymous->CreateTable(Table()),
      StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("CreateTable")));
  ASSERT_THAT(admin->CreateTable(Table()), IsOk());
  const std::vector<uint64_t> keys = {7};
  EXPECT_THAT(anonymous->Push("users", keys, std::vector<float>(4, 1.0f)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Push")));
  EXPECT_THAT(anonymous->Checkpoint("c", 1).status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  std::vector<float> rows(4, 9.0f);
  EXPECT_THAT(anonymous->Pull("users", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));
  EXPECT_THAT(anonymous->ListTables().status(), IsOk());
  EXPECT_THAT(anonymous->Stats().status(), IsOk());
  EXPECT_THAT(anonymous->CheckHealth(), IsOk());
}

TEST_F(SecurityTest, WithAuthReadsReadsNeedTheTokenToo) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  options.flags.push_back("--auth_reads");
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  EXPECT_THAT(server.WaitForLog("auth_reads=on"), IsOk());
  std::unique_ptr<PsClient> admin = Client(server, certs_->ca_file, kToken);
  std::unique_ptr<PsClient> anonymous = Client(server, certs_->ca_file, "");
  ASSERT_NE(admin, nullptr);
  ASSERT_NE(anonymous, nullptr);
  ASSERT_THAT(admin->CreateTable(Table()), IsOk());
  const std::vector<uint64_t> keys = {7};
  ASSERT_THAT(admin->Push("users", keys, std::vector<float>(4, 1.0f)), IsOk());
  std::vector<float> rows(4, 9.0f);
  EXPECT_THAT(anonymous->Pull("users", keys, absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Pull")));
  EXPECT_EQ(rows, std::vector<float>(4, 9.0f));
  EXPECT_THAT(anonymous->ListTables().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(anonymous->Stats().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(anonymous->CheckHealth(), IsOk());
  ASSERT_THAT(admin->Pull("users", keys, absl::MakeSpan(rows)), IsOk());
  EXPECT_EQ(rows, std::vector<float>(4, -1.0f));
  EXPECT_THAT(admin->Stats().status(), IsOk());
}

TEST_F(SecurityTest, AuthReadsWithoutATokenIsAUsageError) {
  ServerProcessOptions options;
  options.flags = {"--auth_reads"};
  ServerProcess server(options);
  STRATA_ASSERT_OK_AND_ASSIGN(ProcessExit exit, server.RunUntilExit());
  EXPECT_EQ(exit.exit_code, 2) << exit.ToString();
  EXPECT_THAT(server.log(), HasSubstr("--auth_reads needs --auth_token_file"));
}

TEST_F(SecurityTest, TokenWithoutTlsBeyondLoopbackLogsAWarning) {
  ServerProcessOptions options;
  options.flags = {"--host=0.0.0.0", "--auth_token_file=" + *token_file_};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  EXPECT_THAT(server.WaitForLog("auth=on"), IsOk());
  EXPECT_THAT(server.log(), ContainsRegex("WARN[^\n]*auth token but no TLS"));
}

TEST_F(SecurityTest, AWrongTokenIsPermissionDenied) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<PsClient> client =
      Client(server, certs_->ca_file, "s3cret-tokem");
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(
      client->CreateTable(Table()),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("CreateTable")));
}

TEST_F(SecurityTest, AClientTrustingAnotherCaCannotConnect) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<PsClient> client =
      Client(server, certs_->other_ca_file, kToken);
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->ListTables().status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       ContainsRegex("[Hh]andshake|[Cc]ertificate|CERTIF")));
}

TEST_F(SecurityTest, WithClientCaAClientWithoutCertificateIsRefused) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  options.flags.push_back("--tls_client_ca_file=" + certs_->ca_file);
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<PsClient> without = Client(server, certs_->ca_file, kToken);
  ASSERT_NE(without, nullptr);
  EXPECT_THAT(without->ListTables().status(),
              StatusIs(absl::StatusCode::kUnavailable));

  PsClientOptions with_cert;
  with_cert.shard_addresses = {server.address()};
  with_cert.tls_ca_file = certs_->ca_file;
  with_cert.tls_client_cert_file = certs_->client_cert_file;
  with_cert.tls_client_key_file = certs_->client_key_file;
  with_cert.auth_token = kToken;
  with_cert.retry_deadline = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(with_cert);
  ASSERT_THAT(client.status(), IsOk());
  EXPECT_THAT((*client)->CreateTable(Table()), IsOk());
}

TEST_F(SecurityTest, OpenPortBeyondLoopbackLogsAWarning) {
  ServerProcessOptions options;
  options.flags = {"--host=0.0.0.0"};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  EXPECT_THAT(server.WaitForLog("tls=off"), IsOk());
  EXPECT_THAT(server.log(), ContainsRegex("WARN[^\n]*no TLS and no auth"));
  EXPECT_THAT(server.log(), HasSubstr("auth=off"));
}

TEST_F(SecurityTest, SecuredPortBeyondLoopbackLogsNoWarning) {
  ServerProcessOptions options;
  options.flags = SecureFlags();
  options.flags.push_back("--host=0.0.0.0");
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  EXPECT_THAT(server.WaitForLog("auth=on"), IsOk());
  EXPECT_THAT(server.log(), Not(HasSubstr("no TLS and no auth")));
}

TEST_F(SecurityTest, UnreadableSecretFilesExitOneNamingTheFile) {
  const std::string missing = dir_->path() + "/missing.pem";
  const std::vector<std::vector<std::string>> configurations = {
      {"--auth_token_file=" + missing},
      {"--tls_cert_file=" + missing,
       "--tls_key_file=" + certs_->server_key_file},
  };
  for (const std::vector<std::string>& flags : configurations) {
    ServerProcessOptions options;
    options.flags = flags;
    ServerProcess server(options);
    absl::StatusOr<ProcessExit> exit = server.RunUntilExit();
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->exit_code, 1) << server.log();
    EXPECT_THAT(server.log(), HasSubstr(missing));
  }
}

}  // namespace
}  // namespace strata
