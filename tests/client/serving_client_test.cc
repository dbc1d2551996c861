// ServingClient against an in-process gRPC server (a fake service at the
// gRPC seam) that refuses every call for overload, as an overloaded
// strata-serving does, or answers each past its deadline, as one whose
// transport has fallen behind does; and against one that restarts on its
// port, as a restarted strata-serving does.

#include "client/serving_client.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/strata.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/server_process.h"

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

// Holds every lookup until released, as a server whose queue is full does.
class HoldingServing final : public v1::ServingService::Service {
 public:
  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest*,
                      v1::LookupResponse* response) override {
    absl::MutexLock lock(&mu);
    ++held;
    mu.Await(absl::Condition(&released));
    response->set_dim(4);
    for (int i = 0; i < 3 * 4; ++i) response->add_values(1.0f);
    return grpc::Status::OK;
  }
  absl::Mutex mu;
  int held ABSL_GUARDED_BY(mu) = 0;
  bool released ABSL_GUARDED_BY(mu) = false;
};

// With the limit, a client shared by more threads than the limit (16 at
// the start) sends no more than that at once; the rest fail at once,
// without reaching the server.
TEST(ServingClientConcurrencyLimitTest, CallsBeyondTheLimitFailLocally) {
  HoldingServing service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ServingClientOptions options;
  options.endpoints = {absl::StrCat("127.0.0.1:", port)};
  options.adaptive_concurrency_limit = true;
  options.retry_deadline = absl::ZeroDuration();
  options.rpc_timeout = absl::Seconds(30);
  auto client = ServingClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  constexpr int kCallers = 20;
  std::vector<absl::Status> results(kCallers);
  std::atomic<int> finished{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      const std::vector<uint64_t> keys = {1, 2, 3};
      std::vector<float> rows(keys.size() * 4);
      results[i] = (*client)->Lookup("t", keys, absl::MakeSpan(rows));
      ++finished;
    });
  }
  // The calls beyond the limit end while the others are held.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (finished.load() < kCallers - 16 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(finished.load(), kCallers - 16);
  {
    absl::MutexLock lock(&service.mu);
    auto sixteen_held = [&service]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service.mu) {
      return service.held == 16;
    };
    EXPECT_TRUE(service.mu.AwaitWithTimeout(absl::Condition(&sixteen_held),
                                            absl::Seconds(30)));
    EXPECT_EQ(service.held, 16);
    service.released = true;
  }
  for (std::thread& caller : callers) caller.join();
  int answered = 0, limited = 0;
  for (const absl::Status& status : results) {
    if (status.ok()) {
      ++answered;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_NE(status.message().find("limited by the client"),
                std::string::npos)
          << status;
      ++limited;
    }
  }
  EXPECT_EQ(answered, 16);
  EXPECT_EQ(limited, kCallers - 16);
  server->Shutdown();
}

// Answers every lookup with rows of 4 ones.
class AnsweringServing final : public v1::ServingService::Service {
 public:
  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override {
    response->set_dim(4);
    for (int i = 0; i < request->keys_size() * 4; ++i) {
      response->add_values(1.0f);
    }
    return grpc::Status::OK;
  }
};

// Runs only as a child of the restart test, which sets the variable to
// "PORT|READY_FILE": serves AnsweringServing on PORT (0: any), writes the
// bound port to READY_FILE and waits to be killed.
TEST(ServingReplicaChild, AnswersUntilKilled) {
  const char* spec = std::getenv("STRATA_SERVING_CLIENT_TEST_CHILD");
  if (spec == nullptr) GTEST_SKIP() << "only as a child process";
  const std::vector<std::string> parts = absl::StrSplit(spec, '|');
  ASSERT_EQ(parts.size(), 2u);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(parts[0], &port));
  AnsweringServing service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  const std::string partial = parts[1] + ".partial";
  std::ofstream(partial) << port;
  std::filesystem::rename(partial, parts[1]);
  while (true) ::pause();
}

// A replica in a process of its own (this test binary again): in the same
// process, the server's threads would poll the client's channel too.
class ReplicaProcess {
 public:
  // Starts it on `port` (0: any); returns the port it listens on, or 0.
  int Start(int port) {
    const std::string ready = absl::StrCat(dir_.path(), "/ready", starts_++);
    absl::StatusOr<pid_t> spawned = strata::testing::SpawnThisTestAsChild(
        "ServingReplicaChild.*", "STRATA_SERVING_CLIENT_TEST_CHILD",
        absl::StrCat(port, "|", ready), /*quiet_stdout=*/true);
    if (!spawned.ok()) return 0;
    pid_ = *spawned;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!std::filesystem::exists(ready) && absl::Now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) != 0) {
        pid_ = 0;  // exited: the port was taken, or it failed
        return 0;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    int bound = 0;
    std::ifstream(ready) >> bound;
    return bound;
  }

  void Kill() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  ~ReplicaProcess() { Kill(); }

 private:
  strata::testing::TempDir dir_{"serving_client_test"};
  pid_t pid_ = 0;
  int starts_ = 0;
};

TEST(ServingClientRestartTest, ALookupRightAfterARestartReachesTheReplica) {
  // The client's process has no other gRPC traffic, so nothing polls its
  // channel while its calls fail at once: without waiting for the
  // connection it found the restarted replica only at gRPC's backup poll,
  // up to 5 s later, past this client's 2 s of retries.
  ReplicaProcess replica;
  const int port = replica.Start(0);
  ASSERT_GT(port, 0);
  ServingClientOptions options;
  options.endpoints = {absl::StrCat("127.0.0.1:", port)};
  options.rpc_timeout = absl::Seconds(1);
  options.retry_deadline = absl::Seconds(2);
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(100);
  auto client = ServingClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> rows(keys.size() * 4);
  ASSERT_TRUE((*client)->Lookup("t", keys, absl::MakeSpan(rows)).ok());

  for (int restart = 0; restart < 3; ++restart) {
    SCOPED_TRACE(absl::StrCat("restart ", restart));
    replica.Kill();
    const absl::Status down =
        (*client)->Lookup("t", keys, absl::MakeSpan(rows));
    EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
    ASSERT_EQ(replica.Start(port), port)
        << "port " << port << " was taken meanwhile";
    rows.assign(rows.size(), 0.0f);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status up = (*client)->Lookup("t", keys, absl::MakeSpan(rows));
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(up.ok()) << up << " after "
                         << std::chrono::duration<double>(took).count() << " s";
    EXPECT_EQ(rows, std::vector<float>(rows.size(), 1.0f));
  }
}

}  // namespace
}  // namespace strata
