// The gRPC rendezvous client against real strata-server processes on
// loopback: values, Get's polling and timeout, a shard that is not up yet,
// tokens and TLS.

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"
#include "worker/collective/rendezvous.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;

constexpr char kToken[] = "rendezvous-token";

// A real clock that counts the pauses between the client's polls.
class PauseCountingClock : public Clock {
 public:
  absl::Time Now() override { return Clock::Real()->Now(); }
  void SleepFor(absl::Duration duration) override {
    {
      absl::MutexLock lock(&mu_);
      ++pauses_;
    }
    Clock::Real()->SleepFor(duration);
  }
  // True once the client paused `n` times; false after `timeout`.
  bool WaitForPauses(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pauses_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  absl::Mutex mu_;
  int pauses_ ABSL_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<RendezvousClient> MakeClient(RendezvousClientOptions options) {
  absl::StatusOr<std::unique_ptr<RendezvousClient>> client =
      CreateGrpcRendezvousClient(options);
  EXPECT_THAT(client.status(), IsOk());
  return client.ok() ? *std::move(client) : nullptr;
}

std::unique_ptr<RendezvousClient> MakeClient(const ServerProcess& server,
                                             Clock* clock = Clock::Real()) {
  RendezvousClientOptions options;
  options.address = server.address();
  options.clock = clock;
  return MakeClient(options);
}

TEST(GrpcRendezvousClientTest, GetReturnsTheValueSet) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<RendezvousClient> client = MakeClient(server);
  ASSERT_NE(client, nullptr);
  const std::string value("ip\0port", 7);
  ASSERT_THAT(client->Set("job/0", value), IsOk());
  EXPECT_THAT(client->Get("job/0", absl::Seconds(5)), IsOkAndHolds(value));
  ASSERT_THAT(client->Set("job/0", "replaced"), IsOk());
  EXPECT_THAT(client->Get("job/0", absl::Seconds(5)),
              IsOkAndHolds(std::string("replaced")));
}

TEST(GrpcRendezvousClientTest, GetOfAKeyNeverSetEndsAtTheTimeoutNamingIt) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  PauseCountingClock clock;
  std::unique_ptr<RendezvousClient> client = MakeClient(server, &clock);
  ASSERT_NE(client, nullptr);
  const absl::Duration timeout = absl::Milliseconds(500);
  const absl::Time start = Clock::Real()->Now();
  EXPECT_THAT(client->Get("job/never", timeout),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("'job/never'"), HasSubstr("500ms"),
                             HasSubstr(server.address()))));
  const absl::Duration took = Clock::Real()->Now() - start;
  EXPECT_GE(took, timeout) << "gave up before the timeout";
  EXPECT_LT(took, absl::Seconds(5)) << "polled far past the timeout";
  // 5, 10, 20, ... 200 ms apart: a handful of polls, not a busy loop.
  EXPECT_TRUE(clock.WaitForPauses(3, absl::ZeroDuration()));
  EXPECT_FALSE(clock.WaitForPauses(40, absl::ZeroDuration()));
}

TEST(GrpcRendezvousClientTest, GetWaitsForAKeySetWhileItPolls) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  PauseCountingClock clock;
  std::unique_ptr<RendezvousClient> reader = MakeClient(server, &clock);
  std::unique_ptr<RendezvousClient> writer = MakeClient(server);
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  absl::StatusOr<std::string> got = absl::UnknownError("Get did not return");
  std::thread polling(
      [&] { got = reader->Get("job/late", absl::Seconds(30)); });
  // Set only once the reader has been answered NOT_FOUND and is pausing.
  EXPECT_TRUE(clock.WaitForPauses(2, absl::Seconds(20)));
  EXPECT_THAT(writer->Set("job/late", "here"), IsOk());
  polling.join();
  EXPECT_THAT(got, IsOkAndHolds(std::string("here")));
}

TEST(GrpcRendezvousClientTest, GetWaitsForAShardThatIsNotUpYet) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_THAT(server.Kill9(), IsOk());
  PauseCountingClock clock;
  std::unique_ptr<RendezvousClient> reader = MakeClient(server, &clock);
  ASSERT_NE(reader, nullptr);
  absl::StatusOr<std::string> got = absl::UnknownError("Get did not return");
  std::thread polling([&] { got = reader->Get("job/0", absl::Seconds(60)); });
  // The reader has been refused (UNAVAILABLE) and is trying again. The
  // restart happens on this thread: see ServerProcess on PR_SET_PDEATHSIG.
  EXPECT_TRUE(clock.WaitForPauses(2, absl::Seconds(20)));
  ASSERT_THAT(server.StartOnSamePort(), IsOk());
  std::unique_ptr<RendezvousClient> writer = MakeClient(server);
  ASSERT_NE(writer, nullptr);
  EXPECT_THAT(writer->Set("job/0", "after restart"), IsOk());
  polling.join();
  EXPECT_THAT(got, IsOkAndHolds(std::string("after restart")));
}

// A client whose channel failed while the shard was down reaches it within
// a second of its restart. Calls that failed at once used to leave no
// thread polling the channel, so the new connection was seen only at
// gRPC's backup poll (every 5 s) and a Set ran out its time.
TEST(GrpcRendezvousClientTest, SetRightAfterARestartReachesTheShard) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_THAT(server.Kill9(), IsOk());
  RendezvousClientOptions options;
  options.address = server.address();
  options.rpc_timeout = absl::Seconds(1);
  std::unique_ptr<RendezvousClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->Get("job/0", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_THAT(server.StartOnSamePort(), IsOk());
  for (int round = 0; round < 3; ++round) {
    const std::string value = absl::StrCat("round ", round);
    EXPECT_THAT(client->Set("job/0", value), IsOk());
    EXPECT_THAT(client->Get("job/0", absl::Seconds(1)), IsOkAndHolds(value));
    if (round < 2) {
      ASSERT_THAT(server.Kill9(), IsOk());
      ASSERT_THAT(server.StartOnSamePort(), IsOk());
    }
  }
}

TEST(GrpcRendezvousClientTest, ShardThatStaysDownEndsGetAtItsTimeout) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_THAT(server.Kill9(), IsOk());
  RendezvousClientOptions options;
  options.address = server.address();
  options.rpc_timeout = absl::Milliseconds(300);
  std::unique_ptr<RendezvousClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  const absl::Time start = Clock::Real()->Now();
  EXPECT_THAT(client->Get("job/0", absl::Milliseconds(700)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("'job/0'"), HasSubstr("last error"))));
  EXPECT_LT(Clock::Real()->Now() - start, absl::Seconds(5));
  // Set tries for rpc_timeout, then reports the last error.
  EXPECT_THAT(client->Set("job/0", "v"),
              StatusIs(AnyOf(Eq(absl::StatusCode::kUnavailable),
                             Eq(absl::StatusCode::kDeadlineExceeded)),
                       HasSubstr(server.address())));
}

TEST(GrpcRendezvousClientTest, ZeroTimeoutAsksOnce) {
  ServerProcess server;
  ASSERT_THAT(server.Start(), IsOk());
  std::unique_ptr<RendezvousClient> client = MakeClient(server);
  ASSERT_NE(client, nullptr);
  ASSERT_THAT(client->Set("k", "v"), IsOk());
  EXPECT_THAT(client->Get("k", absl::ZeroDuration()),
              IsOkAndHolds(std::string("v")));
  EXPECT_THAT(client->Get("missing", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(GrpcRendezvousClientTest, RefusedTokenFailsAtOnceInsteadOfPolling) {
  TempDir dir("rendezvous-token");
  const std::string token_file = dir.path() + "/token";
  ASSERT_THAT(testing::WriteTextFile(token_file, kToken), IsOk());
  ServerProcessOptions server_options;
  server_options.flags = {"--auth_token_file=" + token_file};
  ServerProcess server(server_options);
  ASSERT_THAT(server.Start(), IsOk());

  RendezvousClientOptions options;
  options.address = server.address();
  std::unique_ptr<RendezvousClient> anonymous = MakeClient(options);
  options.auth_token = "wrong";
  std::unique_ptr<RendezvousClient> wrong = MakeClient(options);
  options.auth_token = kToken;
  std::unique_ptr<RendezvousClient> member = MakeClient(options);
  ASSERT_NE(anonymous, nullptr);
  ASSERT_NE(wrong, nullptr);
  ASSERT_NE(member, nullptr);

  EXPECT_THAT(anonymous->Set("k", "v"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("'k'")));
  EXPECT_THAT(wrong->Set("k", "v"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ASSERT_THAT(member->Set("k", "v"), IsOk());
  const absl::Time start = Clock::Real()->Now();
  EXPECT_THAT(anonymous->Get("k", absl::Seconds(60)),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(wrong->Get("k", absl::Seconds(60)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_LT(Clock::Real()->Now() - start, absl::Seconds(10));
  EXPECT_THAT(member->Get("k", absl::Seconds(5)),
              IsOkAndHolds(std::string("v")));
}

TEST(GrpcRendezvousClientTest, WorksOverTlsWithTheToken) {
  TempDir dir("rendezvous-tls");
  absl::StatusOr<testing::TestCerts> certs = testing::MakeTestCerts(dir.path());
  ASSERT_THAT(certs.status(), IsOk());
  const std::string token_file = dir.path() + "/token";
  ASSERT_THAT(testing::WriteTextFile(token_file, kToken), IsOk());
  ServerProcessOptions server_options;
  server_options.flags = {"--tls_cert_file=" + certs->server_cert_file,
                          "--tls_key_file=" + certs->server_key_file,
                          "--auth_token_file=" + token_file};
  ServerProcess server(server_options);
  ASSERT_THAT(server.Start(), IsOk());

  RendezvousClientOptions options;
  options.address = server.address();
  options.tls_ca_file = certs->ca_file;
  options.auth_token = kToken;
  std::unique_ptr<RendezvousClient> client = MakeClient(options);
  ASSERT_NE(client, nullptr);
  ASSERT_THAT(client->Set("k", "over tls"), IsOk());
  EXPECT_THAT(client->Get("k", absl::Seconds(5)),
              IsOkAndHolds(std::string("over tls")));
}

TEST(GrpcRendezvousClientTest, CreateRejectsBadOptions) {
  RendezvousClientOptions options;
  EXPECT_THAT(CreateGrpcRendezvousClient(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty shard address")));
  options.address = "127.0.0.1:1";
  options.rpc_timeout = absl::ZeroDuration();
  EXPECT_THAT(
      CreateGrpcRendezvousClient(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rpc_timeout")));
  options.rpc_timeout = absl::Seconds(1);
  options.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(CreateGrpcRendezvousClient(options).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ca.pem")));
}

}  // namespace
}  // namespace strata
