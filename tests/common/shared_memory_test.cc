#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kMax = size_t{1} << 20;

std::string ProcPath(int fd) {
  return absl::StrCat("/proc/", getpid(), "/fd/", fd);
}

TEST(SharedMemoryTest, WhatOneSideWritesTheOtherReads) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> created =
      SharedMemory::Create(8192);
  ASSERT_THAT(created, IsOk());
  absl::StatusOr<std::unique_ptr<SharedMemory>> opened =
      SharedMemory::Open((*created)->path(), 8192, kMax);
  ASSERT_THAT(opened, IsOk());
  EXPECT_NE((*created)->data(), (*opened)->data());
  std::memcpy((*opened)->data() + 4000, "rows", 4);
  EXPECT_EQ(std::memcmp((*created)->data() + 4000, "rows", 4), 0);
  EXPECT_TRUE((*opened)->StillNamedBy((*created)->path()));
}

TEST(SharedMemoryTest, RefusesPathsOutsideProcFd) {
  for (const std::string path :
       {"/etc/passwd", "/proc/self/fd/3", "/proc/1/fd/../../etc/passwd",
        "/proc/1/fd/", "/proc//fd/3", "proc/1/fd/3", "/proc/1/fd/3/x"}) {
    EXPECT_THAT(SharedMemory::Open(path, 4096, kMax),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("is not /proc/<pid>/fd/<fd>")))
        << path;
  }
}

TEST(SharedMemoryTest, RefusesSizesOfZeroAndOverTheLimit) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> created =
      SharedMemory::Create(8192);
  ASSERT_THAT(created, IsOk());
  EXPECT_THAT(SharedMemory::Open((*created)->path(), 0, kMax),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedMemory::Open((*created)->path(), 8192, 4096),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("want 1 to 4096")));
  EXPECT_THAT(SharedMemory::Open((*created)->path(), 4096, kMax),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("holds 8192 bytes, not the 4096 asked")));
}

// A memfd whose size is not sealed could be shrunk under the shard's
// mapping: the shard's next write past the end would be SIGBUS.
TEST(SharedMemoryTest, RefusesAMemfdWhoseSizeIsNotSealed) {
  const int fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  EXPECT_THAT(SharedMemory::Open(ProcPath(fd), 4096, kMax),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not a memfd sealed")));
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);  // Growing still open.
  EXPECT_THAT(SharedMemory::Open(ProcPath(fd), 4096, kMax),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
  EXPECT_THAT(SharedMemory::Open(ProcPath(fd), 4096, kMax), IsOk());
  close(fd);
}

TEST(SharedMemoryTest, OpensNeitherPipesNorMissingDescriptors) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_THAT(SharedMemory::Open(ProcPath(pipe_fds[0]), 4096, kMax),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is not a memfd")));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_THAT(SharedMemory::Open(ProcPath(pipe_fds[0]), 4096, kMax),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cannot find")));
}

TEST(SharedMemoryTest, IsNoLongerNamedOnceItsCreatorClosedIt) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> created =
      SharedMemory::Create(4096);
  ASSERT_THAT(created, IsOk());
  const std::string path = (*created)->path();
  absl::StatusOr<std::unique_ptr<SharedMemory>> opened =
      SharedMemory::Open(path, 4096, kMax);
  ASSERT_THAT(opened, IsOk());
  created->reset();
  EXPECT_FALSE((*opened)->StillNamedBy(path));
  // The mapping itself stays usable until its holder drops it.
  (*opened)->data()[0] = 1;
  EXPECT_EQ((*opened)->data()[0], 1);
}

}  // namespace
}  // namespace strata
