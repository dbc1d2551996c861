// Gloo collectives among ranks that are threads of this test, each with its
// own rendezvous client and Gloo TCP device on 127.0.0.1, meeting through a
// real strata-server process.

#include "worker/collective/gloo_collective.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"
#include "worker/collective/collective.h"
#include "worker/collective/rendezvous.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::AllOf;
using ::testing::Each;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// What one rank does once its collective is connected.
using RankBody = std::function<absl::Status(Collective&)>;

// One rank to run: its options (rendezvous is filled in) and body.
struct Rank {
  Rank(GlooCollectiveOptions options, RankBody body,
       std::string auth_token = "", absl::Notification* gone = nullptr)
      : options(std::move(options)),
        body(std::move(body)),
        auth_token(std::move(auth_token)),
        gone(gone) {}

  GlooCollectiveOptions options;
  RankBody body;
  // Token of the rank's rendezvous client.
  std::string auth_token;
  // When not null: notified once the rank's collective is destroyed.
  absl::Notification* gone;
};

class GlooCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_THAT(server_.Start(), IsOk()); }

  GlooCollectiveOptions Options(int rank, int world_size,
                                const std::string& job_id,
                                absl::Duration timeout = absl::Seconds(30)) {
    GlooCollectiveOptions options;
    options.rank = rank;
    options.world_size = world_size;
    options.job_id = job_id;
    options.host = "127.0.0.1";
    options.timeout = timeout;
    return options;
  }

  // Runs every rank in its own thread against `server`, each with its own
  // rendezvous client; returns each rank's status: of connecting, else of
  // its body.
  static std::vector<absl::Status> RunRanks(const ServerProcess& server,
                                            std::vector<Rank> ranks) {
    std::vector<absl::Status> statuses(ranks.size(),
                                       absl::UnknownError("did not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ranks.size(); ++i) {
      threads.emplace_back([&server, &ranks, &statuses, i] {
        statuses[i] = RunRank(server, ranks[i]);
        if (ranks[i].gone != nullptr) ranks[i].gone->Notify();
      });
    }
    for (std::thread& thread : threads) thread.join();
    return statuses;
  }

  std::vector<absl::Status> RunRanks(std::vector<Rank> ranks) {
    return RunRanks(server_, std::move(ranks));
  }

  // Every rank of a job of `world_size` runs `body(rank, collective)`.
  std::vector<absl::Status> RunJob(
      int world_size, const std::string& job_id,
      const std::function<absl::Status(int, Collective&)>& body,
      absl::Duration timeout = absl::Seconds(30)) {
    std::vector<Rank> ranks;
    for (int r = 0; r < world_size; ++r) {
      ranks.emplace_back(Options(r, world_size, job_id, timeout),
                         [r, &body](Collective& c) { return body(r, c); });
    }
    return RunRanks(std::move(ranks));
  }

  static absl::Status RunRank(const ServerProcess& server, Rank& rank) {
    RendezvousClientOptions client_options;
    client_options.address = server.address();
    client_options.auth_token = rank.auth_token;
    absl::StatusOr<std::unique_ptr<RendezvousClient>> client =
        CreateGrpcRendezvousClient(client_options);
    if (!client.ok()) return client.status();
    rank.options.rendezvous = client->get();
    absl::StatusOr<std::unique_ptr<Collective>> collective =
        CreateGlooCollective(rank.options);
    if (!collective.ok()) return collective.status();
    if ((*collective)->backend() != std::string("gloo") ||
        (*collective)->rank() != rank.options.rank ||
        (*collective)->world_size() != rank.options.world_size) {
      return absl::InternalError("collective reports the wrong rank or size");
    }
    return rank.body(**collective);
  }

  ServerProcess server_;
};

// Data of `rank`: integers in floats, so that sums are exact.
std::vector<float> RankData(int rank, size_t n, int salt = 0) {
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i) {
    data[i] =
        static_cast<float>((rank + 1) * static_cast<int>(i % 4096) + salt);
  }
  return data;
}

// The elementwise sum of RankData over ranks 0..world_size-1.
std::vector<float> SumOfRanks(int world_size, size_t n, int salt = 0) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < world_size; ++r) {
    const std::vector<float> data = RankData(r, n, salt);
    for (size_t i = 0; i < n; ++i) sum[i] += data[i];
  }
  return sum;
}

class GlooCollectiveWorldTest : public GlooCollectiveTest,
                                public ::testing::WithParamInterface<int> {};

TEST_P(GlooCollectiveWorldTest, AllreduceSumGivesEveryRankTheExactSum) {
  const int world = GetParam();
  constexpr size_t kSize = 1000;
  std::vector<std::vector<float>> results(world);
  const std::vector<absl::Status> statuses =
      RunJob(world, "allreduce", [&](int rank, Collective& collective) {
        results[rank] = RankData(rank, kSize);
        return collective.AllreduceSum(absl::MakeSpan(results[rank]));
      });
  const std::vector<float> expected = SumOfRanks(world, kSize);
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
    EXPECT_THAT(results[r], ElementsAreArray(expected)) << "rank " << r;
  }
}

TEST_P(GlooCollectiveWorldTest, BroadcastGivesEveryRankTheRootsData) {
  const int world = GetParam();
  const int root = world - 1;
  constexpr size_t kSize = 777;
  std::vector<std::vector<float>> results(world);
  const std::vector<absl::Status> statuses =
      RunJob(world, "broadcast", [&](int rank, Collective& collective) {
        results[rank] = RankData(rank, kSize, /*salt=*/rank * 100000);
        return collective.Broadcast(absl::MakeSpan(results[rank]), root);
      });
  const std::vector<float> expected = RankData(root, kSize, root * 100000);
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
    EXPECT_THAT(results[r], ElementsAreArray(expected)) << "rank " << r;
  }
}

TEST_P(GlooCollectiveWorldTest, BarrierReturnsOnlyOnceEveryRankArrived) {
  const int world = GetParam();
  constexpr int kRounds = 20;
  std::atomic<int> arrived{0};
  std::vector<int> seen_wrong_count(world, 0);
  const std::vector<absl::Status> statuses =
      RunJob(world, "barrier", [&](int rank, Collective& collective) {
        for (int round = 1; round <= kRounds; ++round) {
          arrived.fetch_add(1);
          if (absl::Status s = collective.Barrier(); !s.ok()) return s;
          // Every rank of this round arrived, and none can arrive for the
          // next round before all of them passed the second barrier.
          if (arrived.load() != round * world) ++seen_wrong_count[rank];
          if (absl::Status s = collective.Barrier(); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
    EXPECT_EQ(seen_wrong_count[r], 0) << "rank " << r;
  }
  EXPECT_EQ(arrived.load(), kRounds * world);
}

TEST_P(GlooCollectiveWorldTest, ManyOperationsInARowStayInStep) {
  const int world = GetParam();
  constexpr int kSteps = 200;
  constexpr size_t kSize = 64;
  std::vector<int> wrong(world, 0);
  const std::vector<absl::Status> statuses =
      RunJob(world, "steps", [&](int rank, Collective& collective) {
        for (int step = 0; step < kSteps; ++step) {
          std::vector<float> data = RankData(rank, kSize, step);
          if (absl::Status s = collective.AllreduceSum(absl::MakeSpan(data));
              !s.ok()) {
            return s;
          }
          if (data != SumOfRanks(world, kSize, step)) ++wrong[rank];
          if (step % 10 == 0) {
            const int root = step / 10 % world;
            std::vector<float> b(kSize, static_cast<float>(rank));
            if (absl::Status s = collective.Broadcast(absl::MakeSpan(b), root);
                !s.ok()) {
              return s;
            }
            if (b != std::vector<float>(kSize, static_cast<float>(root))) {
              ++wrong[rank];
            }
          }
          if (step % 25 == 0) {
            if (absl::Status s = collective.Barrier(); !s.ok()) return s;
          }
        }
        return absl::OkStatus();
      });
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
  }
}

TEST_P(GlooCollectiveWorldTest, AllreduceSumOfAMillionFloatsIsExact) {
  const int world = GetParam();
  constexpr size_t kSize = size_t{1} << 20;
  std::vector<std::vector<float>> results(world);
  const std::vector<absl::Status> statuses =
      RunJob(world, "large", [&](int rank, Collective& collective) {
        results[rank] = RankData(rank, kSize);
        return collective.AllreduceSum(absl::MakeSpan(results[rank]));
      });
  const std::vector<float> expected = SumOfRanks(world, kSize);
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
    // One comparison per rank: a mismatch report of 1M elements is useless.
    EXPECT_TRUE(results[r] == expected) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(TwoAndThreeRanks, GlooCollectiveWorldTest,
                         ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "Ranks");
                         });

TEST_F(GlooCollectiveTest, OneRankIsItsOwnJob) {
  std::vector<float> data = {1, 2, 3};
  const std::vector<absl::Status> statuses =
      RunJob(1, "alone", [&](int, Collective& collective) {
        if (absl::Status s = collective.AllreduceSum(absl::MakeSpan(data));
            !s.ok()) {
          return s;
        }
        if (absl::Status s = collective.Broadcast(absl::MakeSpan(data), 0);
            !s.ok()) {
          return s;
        }
        return collective.Barrier();
      });
  EXPECT_THAT(statuses[0], IsOk());
  EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
}

TEST_F(GlooCollectiveTest, RanksMissingAPeerFailWithDeadlineExceeded) {
  // Ranks 0 and 1 of 3 join; rank 2 never does.
  const absl::Duration timeout = absl::Seconds(2);
  const RankBody unreachable = [](Collective&) {
    return absl::InternalError("connected without rank 2");
  };
  const absl::Time start = Clock::Real()->Now();
  const std::vector<absl::Status> statuses =
      RunRanks({{Options(0, 3, "missing", timeout), unreachable, ""},
                {Options(1, 3, "missing", timeout), unreachable, ""}});
  const absl::Duration took = Clock::Real()->Now() - start;
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 AllOf(HasSubstr("job 'missing'"),
                                       HasSubstr("was not set within"))));
  }
  EXPECT_GE(took, timeout);
  EXPECT_LT(took, absl::Seconds(10)) << "waited far past the timeout";
}

TEST_F(GlooCollectiveTest, PeerSkippingAnOperationMakesItTimeOut) {
  const absl::Duration timeout = absl::Seconds(1);
  absl::Notification rank0_done;
  absl::Status first = absl::UnknownError("not run");
  absl::Status second = absl::UnknownError("not run");
  const std::vector<absl::Status> statuses =
      RunRanks({{Options(0, 2, "skip", timeout),
                 [&](Collective& collective) {
                   std::vector<float> data(16, 1.0f);
                   first = collective.AllreduceSum(absl::MakeSpan(data));
                   second = collective.AllreduceSum(absl::MakeSpan(data));
                   rank0_done.Notify();
                   return absl::OkStatus();
                 },
                 ""},
                {Options(1, 2, "skip", timeout),
                 [&](Collective&) {
                   // Stays connected, but never takes part, until rank 0 gave
                   // up.
                   rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60));
                   return absl::OkStatus();
                 },
                 ""}});
  EXPECT_THAT(statuses[0], IsOk());
  EXPECT_THAT(statuses[1], IsOk());
  EXPECT_THAT(first, StatusIs(absl::StatusCode::kDeadlineExceeded,
                              HasSubstr("allreduce of 16 floats")));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("unusable")));
}

TEST_F(GlooCollectiveTest, PeerThatLeftMakesTheNextOperationFail) {
  absl::Notification rank1_gone;
  absl::Status after = absl::UnknownError("not run");
  const RankBody one_sum = [](Collective& collective) {
    std::vector<float> data(8, 1.0f);
    return collective.AllreduceSum(absl::MakeSpan(data));
  };
  const std::vector<absl::Status> statuses = RunRanks(
      {{Options(0, 2, "leaver", absl::Seconds(5)),
        [&](Collective& collective) {
          if (absl::Status s = one_sum(collective); !s.ok()) return s;
          // Rank 1 destroyed its collective (closing its connections).
          rank1_gone.WaitForNotificationWithTimeout(absl::Seconds(60));
          std::vector<float> data(8, 1.0f);
          after = collective.AllreduceSum(absl::MakeSpan(data));
          return absl::OkStatus();
        }},
       {Options(1, 2, "leaver", absl::Seconds(5)), one_sum, "", &rank1_gone}});
  EXPECT_THAT(statuses[0], IsOk());
  EXPECT_THAT(statuses[1], IsOk());
  EXPECT_THAT(after, StatusIs(absl::StatusCode::kUnavailable,
                              HasSubstr("allreduce of 8 floats")));
}

TEST_F(GlooCollectiveTest, DistinctJobIdsDoNotMeet) {
  const absl::Duration timeout = absl::Seconds(1);
  const RankBody unreachable = [](Collective&) {
    return absl::InternalError("met a rank of another job");
  };
  const std::vector<absl::Status> statuses =
      RunRanks({{Options(0, 2, "job-a", timeout), unreachable, ""},
                {Options(1, 2, "job-b", timeout), unreachable, ""}});
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("job 'job-a'")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("job 'job-b'")));
}

TEST_F(GlooCollectiveTest, TwoJobsOnOneShardEachSumTheirOwnRanks) {
  constexpr size_t kSize = 100;
  std::vector<std::vector<float>> results(4);
  std::vector<Rank> ranks;
  for (int job = 0; job < 2; ++job) {
    for (int r = 0; r < 2; ++r) {
      const int i = job * 2 + r;
      ranks.push_back({Options(r, 2, absl::StrCat("job-", job)),
                       [&results, i, r, job](Collective& collective) {
                         results[i] = RankData(r, kSize, job * 1000);
                         return collective.AllreduceSum(
                             absl::MakeSpan(results[i]));
                       },
                       ""});
    }
  }
  const std::vector<absl::Status> statuses = RunRanks(std::move(ranks));
  for (int job = 0; job < 2; ++job) {
    const std::vector<float> expected = SumOfRanks(2, kSize, job * 1000);
    for (int r = 0; r < 2; ++r) {
      EXPECT_THAT(statuses[job * 2 + r], IsOk());
      EXPECT_THAT(results[job * 2 + r], ElementsAreArray(expected))
          << "job " << job << " rank " << r;
    }
  }
}

TEST_F(GlooCollectiveTest, RefusedTokenFailsTheRendezvousAtOnce) {
  TempDir dir("gloo-token");
  const std::string token_file = dir.path() + "/token";
  ASSERT_THAT(testing::WriteTextFile(token_file, "job-secret"), IsOk());
  ServerProcessOptions server_options;
  server_options.flags = {"--auth_token_file=" + token_file};
  ServerProcess server(server_options);
  ASSERT_THAT(server.Start(), IsOk());
  const RankBody sum = [](Collective& collective) {
    std::vector<float> data(4, 1.0f);
    return collective.AllreduceSum(absl::MakeSpan(data));
  };
  const absl::Time start = Clock::Real()->Now();
  std::vector<absl::Status> statuses =
      RunRanks(server, {{Options(0, 2, "tok", absl::Seconds(60)), sum, "wrong"},
                        {Options(1, 2, "tok", absl::Seconds(60)), sum, ""}});
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_LT(Clock::Real()->Now() - start, absl::Seconds(30));
  statuses = RunRanks(
      server, {{Options(0, 2, "tok", absl::Seconds(30)), sum, "job-secret"},
               {Options(1, 2, "tok", absl::Seconds(30)), sum, "job-secret"}});
  EXPECT_THAT(statuses, Each(IsOk()));
}

TEST_F(GlooCollectiveTest, BadOptionsAreInvalidArguments) {
  RendezvousClientOptions client_options;
  client_options.address = server_.address();
  absl::StatusOr<std::unique_ptr<RendezvousClient>> client =
      CreateGrpcRendezvousClient(client_options);
  ASSERT_THAT(client.status(), IsOk());
  const auto create = [&](GlooCollectiveOptions options) {
    return CreateGlooCollective(options).status();
  };
  GlooCollectiveOptions options = Options(0, 2, "bad");
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("rendezvous is null")));
  options.rendezvous = client->get();
  options.rank = 2;
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("rank 2 is outside 0..1")));
  options.rank = 0;
  options.world_size = 0;
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("world_size")));
  options.world_size = 2;
  options.job_id = "";
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("job_id")));
  options.job_id = std::string(129, 'j');
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("job_id")));
  options.job_id = "bad";
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("timeout")));
  options.timeout = absl::InfiniteDuration();
  EXPECT_THAT(create(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("timeout")));
  options.timeout = absl::Seconds(1);
  options.host = "";
  EXPECT_THAT(create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host")));
}

TEST_F(GlooCollectiveTest, HostThatIsUnknownOrNotLocalIsInvalid) {
  RendezvousClientOptions client_options;
  client_options.address = server_.address();
  absl::StatusOr<std::unique_ptr<RendezvousClient>> client =
      CreateGrpcRendezvousClient(client_options);
  ASSERT_THAT(client.status(), IsOk());
  GlooCollectiveOptions options = Options(0, 1, "host", absl::Seconds(2));
  options.rendezvous = client->get();
  // Gloo's own lookup of an unknown name reads an uninitialized pointer (a
  // crash by the second try): the name must never reach it.
  options.host = "no-such-host.invalid";
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_THAT(CreateGlooCollective(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("cannot resolve host 'no-such-host."
                                   "invalid'")));
  }
  // TEST-NET-1 (RFC 5737): an address of no interface here.
  options.host = "192.0.2.1";
  EXPECT_THAT(CreateGlooCollective(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot listen on host '192.0.2.1'")));
}

TEST_F(GlooCollectiveTest, HostMayBeANameOfThisMachine) {
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    GlooCollectiveOptions options = Options(r, 2, "localhost");
    options.host = "localhost";
    ranks.emplace_back(options, [](Collective& collective) {
      std::vector<float> data(10, 2.0f);
      if (absl::Status s = collective.AllreduceSum(absl::MakeSpan(data));
          !s.ok()) {
        return s;
      }
      if (data != std::vector<float>(10, 4.0f)) {
        return absl::InternalError("wrong sum");
      }
      return absl::OkStatus();
    });
  }
  EXPECT_THAT(RunRanks(std::move(ranks)), Each(IsOk()));
}

}  // namespace
}  // namespace strata
