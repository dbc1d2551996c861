// The NCCL collective with one thread per GPU of this machine as the ranks
// of a job (one GPU: a job of one rank, which still goes through the
// communicator's setup and every operation), meeting through an in-process
// rendezvous. Needs a GPU; run through tests/gpu/check.sh.

#include "worker/collective/nccl_collective.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/fake_rendezvous_client.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::FakeRendezvousClient;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kSmall = 1000;
constexpr size_t kLarge = size_t{1} << 20;

bool ExpectNoGpu() {
  const char* value = std::getenv("STRATA_EXPECT_NO_GPU");
  return value != nullptr && std::string(value) == "1";
}

int GpuCount() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
}

NcclCollectiveOptions RankOptions(int rank, int world_size,
                                  FakeRendezvousClient* rendezvous) {
  NcclCollectiveOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.device = rank;
  options.rendezvous = rendezvous;
  options.job_id = "job-1";
  options.timeout = absl::Seconds(60);
  return options;
}

// What one rank saw; the main thread checks it.
struct RankResult {
  absl::Status status;
  std::string backend;
  int rank = -1;
  int world_size = 0;
  std::vector<float> small_sum, large_sum, broadcast;
};

// Values are small integers and halves, so every summation order gives the
// exact sum.
absl::Status RunRank(int rank, int world_size, FakeRendezvousClient* rendezvous,
                     RankResult* result) {
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<Collective> collective,
      CreateNcclCollective(RankOptions(rank, world_size, rendezvous)));
  result->backend = collective->backend();
  result->rank = collective->rank();
  result->world_size = collective->world_size();

  result->small_sum.resize(kSmall);
  for (size_t k = 0; k < kSmall; ++k) {
    result->small_sum[k] = 0.5f * (rank + 1) + k;
  }
  STRATA_RETURN_IF_ERROR(
      collective->AllreduceSum(absl::MakeSpan(result->small_sum)));
  // Grows the device buffer.
  result->large_sum.resize(kLarge);
  for (size_t k = 0; k < kLarge; ++k) {
    result->large_sum[k] = static_cast<float>(k % 1024 + rank);
  }
  STRATA_RETURN_IF_ERROR(
      collective->AllreduceSum(absl::MakeSpan(result->large_sum)));
  STRATA_RETURN_IF_ERROR(collective->AllreduceSum(absl::Span<float>()));

  result->broadcast.resize(kSmall);
  for (size_t k = 0; k < kSmall; ++k) {
    result->broadcast[k] = 10.0f * rank + k;
  }
  STRATA_RETURN_IF_ERROR(collective->Broadcast(
      absl::MakeSpan(result->broadcast), /*root=*/world_size - 1));
  return collective->Barrier();
}

TEST(NcclCollectiveTest, EveryGpuAllreducesBroadcastsAndMeetsAtBarrier) {
  const int world_size = std::min(GpuCount(), 8);
  ASSERT_GE(world_size, 1) << "no GPU";
  FakeRendezvousClient rendezvous;
  std::vector<RankResult> results(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank].status =
          RunRank(rank, world_size, &rendezvous, &results[rank]);
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (int rank = 0; rank < world_size; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", world_size));
    const RankResult& result = results[rank];
    ASSERT_THAT(result.status, IsOk());
    EXPECT_EQ(result.backend, "nccl");
    EXPECT_EQ(result.rank, rank);
    EXPECT_EQ(result.world_size, world_size);
    const float halves = 0.5f * world_size * (world_size + 1) / 2;
    for (size_t k = 0; k < kSmall; ++k) {
      ASSERT_EQ(result.small_sum[k], halves + world_size * k) << k;
    }
    const float ranks = world_size * (world_size - 1) / 2;
    for (size_t k = 0; k < kLarge; ++k) {
      ASSERT_EQ(result.large_sum[k], world_size * (k % 1024) + ranks) << k;
    }
    for (size_t k = 0; k < kSmall; ++k) {
      ASSERT_EQ(result.broadcast[k], 10.0f * (world_size - 1) + k) << k;
    }
  }
  // Rank 0 published the 128-byte id as hex.
  EXPECT_EQ(rendezvous.ValueForTest("job-1/nccl_id").size(), 256u);
}

TEST(NcclCollectiveTest, MissingRankZeroIsDeadlineExceeded) {
  FakeRendezvousClient rendezvous;
  NcclCollectiveOptions options = RankOptions(1, 2, &rendezvous);
  options.device = 0;
  options.timeout = absl::Milliseconds(200);
  EXPECT_THAT(CreateNcclCollective(options).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("job-1/nccl_id")));
}

TEST(NcclCollectiveTest, MissingPeerTimesOutAndAborts) {
  FakeRendezvousClient rendezvous;
  NcclCollectiveOptions options = RankOptions(0, 2, &rendezvous);
  options.timeout = absl::Seconds(3);
  EXPECT_THAT(CreateNcclCollective(options).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("ncclCommInitRankConfig")));
}

TEST(NcclCollectiveTest, MalformedUniqueIdIsRejected) {
  FakeRendezvousClient rendezvous;
  ASSERT_THAT(rendezvous.Set("job-1/nccl_id", "not hex"), IsOk());
  NcclCollectiveOptions options = RankOptions(1, 2, &rendezvous);
  options.device = 0;
  EXPECT_THAT(CreateNcclCollective(options).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not an NCCL unique id")));
}

TEST(NcclCollectiveTest, BadOptionsAreRejected) {
  FakeRendezvousClient rendezvous;
  NcclCollectiveOptions options = RankOptions(0, 0, &rendezvous);
  EXPECT_THAT(
      CreateNcclCollective(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size")));
  options = RankOptions(2, 2, &rendezvous);
  EXPECT_THAT(CreateNcclCollective(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  options = RankOptions(0, 2, nullptr);
  EXPECT_THAT(
      CreateNcclCollective(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rendezvous")));
  options = RankOptions(0, 1, &rendezvous);
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(
      CreateNcclCollective(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout")));
  options = RankOptions(0, 1, &rendezvous);
  options.device = 1000;
  EXPECT_THAT(CreateNcclCollective(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("device 1000 does not exist")));
}

TEST(NcclCollectiveTest, BroadcastFromANonRankIsRejected) {
  FakeRendezvousClient rendezvous;
  auto collective = CreateNcclCollective(RankOptions(0, 1, &rendezvous));
  ASSERT_THAT(collective.status(), IsOk());
  std::vector<float> data(4, 1.0f);
  EXPECT_THAT((*collective)->Broadcast(absl::MakeSpan(data), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root")));
  // Not an operation failure: the collective still works.
  EXPECT_THAT((*collective)->Broadcast(absl::MakeSpan(data), 0), IsOk());
  EXPECT_THAT((*collective)->AllreduceSum(absl::MakeSpan(data)), IsOk());
  EXPECT_EQ(data, std::vector<float>(4, 1.0f));
}

TEST(NcclCollectiveTest, WithoutGpuCreateFailsWithFailedPrecondition) {
  if (!ExpectNoGpu()) {
    GTEST_SKIP() << "runs with STRATA_EXPECT_NO_GPU=1 CUDA_VISIBLE_DEVICES=";
  }
  FakeRendezvousClient rendezvous;
  EXPECT_THAT(CreateNcclCollective(RankOptions(0, 1, &rendezvous)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no usable CUDA device")));
}

}  // namespace
}  // namespace strata
