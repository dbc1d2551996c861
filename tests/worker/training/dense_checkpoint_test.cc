#include "worker/training/dense_checkpoint.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

DenseCheckpoint Sample(int64_t step) {
  DenseCheckpoint c;
  c.global_step = step;
  c.epoch = 2;
  c.batches_in_epoch = 17;
  c.ps_checkpoint_id = absl::StrCat("step-", step);
  c.model_description = "dense 13 -> 16";
  c.parameters = {1.5f, -2.25f, 0.0f, 3e-8f};
  c.optimizer_state = std::string("\0state\xff", 7);
  return c;
}

TEST(DenseCheckpointTest, LatestRoundTripsEveryField) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  ASSERT_THAT(WriteDenseCheckpoint(fs, dir.path(), Sample(10)), IsOk());
  ASSERT_THAT(WriteDenseCheckpoint(fs, dir.path(), Sample(20)), IsOk());
  auto read = ReadLatestDenseCheckpoint(fs, dir.path());
  ASSERT_THAT(read.status(), IsOk());
  const DenseCheckpoint want = Sample(20);
  EXPECT_EQ(read->global_step, 20);
  EXPECT_EQ(read->epoch, want.epoch);
  EXPECT_EQ(read->batches_in_epoch, want.batches_in_epoch);
  EXPECT_EQ(read->ps_checkpoint_id, want.ps_checkpoint_id);
  EXPECT_EQ(read->model_description, want.model_description);
  EXPECT_EQ(read->parameters, want.parameters);
  EXPECT_EQ(read->optimizer_state, want.optimizer_state);
}

TEST(DenseCheckpointTest, MissingDirectoryIsNotFound) {
  TempDir dir;
  EXPECT_THAT(ReadLatestDenseCheckpoint(FileSystem::Default(),
                                        absl::StrCat(dir.path(), "/none")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/none")));
}

TEST(DenseCheckpointTest, FlippedByteIsDataLossNamingTheFile) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  ASSERT_THAT(WriteDenseCheckpoint(fs, dir.path(), Sample(3)), IsOk());
  const std::string path = absl::StrCat(dir.path(), "/dense-3.ckpt");
  auto bytes = fs->ReadFile(path);
  ASSERT_THAT(bytes.status(), IsOk());
  std::string corrupt = *bytes;
  corrupt[corrupt.size() - 3] ^= 0x40;
  ASSERT_THAT(fs->WriteFileAtomically(path, corrupt), IsOk());
  EXPECT_THAT(ReadLatestDenseCheckpoint(fs, dir.path()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dense-3.ckpt")));
  ASSERT_THAT(fs->WriteFileAtomically(path, bytes->substr(0, 30)), IsOk());
  EXPECT_THAT(ReadLatestDenseCheckpoint(fs, dir.path()),
              StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace strata
