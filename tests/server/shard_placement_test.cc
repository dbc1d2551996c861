#include "server/shard_placement.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

ShardPlacement Placement(uint32_t index, uint32_t count) {
  ShardPlacement placement;
  placement.shard_index = index;
  placement.num_shards = count;
  return placement;
}

TEST(ShardPlacementTest, FirstUseRecordsThenTheSamePlacementPasses) {
  TempDir dir("shard_placement_test");
  FileSystem& files = *FileSystem::Default();
  EXPECT_THAT(ReadShardPlacement(files, dir.path()),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(CheckShardPlacement(files, dir.path(), Placement(2, 3)), IsOk());
  EXPECT_THAT(ReadShardPlacement(files, dir.path()),
              IsOkAndHolds(Placement(2, 3)));
  EXPECT_THAT(CheckShardPlacement(files, dir.path(), Placement(2, 3)), IsOk());
}

TEST(ShardPlacementTest, AnotherCountIndexOrMapVersionIsRefused) {
  TempDir dir("shard_placement_test");
  FileSystem& files = *FileSystem::Default();
  ASSERT_THAT(CheckShardPlacement(files, dir.path(), Placement(1, 2)), IsOk());
  ShardPlacement newer_map = Placement(1, 2);
  newer_map.map_version = 2;
  for (const ShardPlacement& other :
       {Placement(1, 3), Placement(0, 2), newer_map}) {
    EXPECT_THAT(
        CheckShardPlacement(files, dir.path(), other),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 AllOf(HasSubstr("shard 1 of 2 (bucket map version 1)"),
                       HasSubstr(other.ToString()))));
  }
  // Refusing changed nothing.
  EXPECT_THAT(ReadShardPlacement(files, dir.path()),
              IsOkAndHolds(Placement(1, 2)));
}

TEST(ShardPlacementTest, DamagedFilesAreDataLossNamingTheFile) {
  TempDir dir("shard_placement_test");
  FileSystem& files = *FileSystem::Default();
  const std::string path = dir.path() + "/SHARD_PLACEMENT";
  for (const char* text :
       {"garbage\n", "shard_index=0\nnum_shards=2\n",
        "shard_index=2\nnum_shards=2\nmap_version=1\n",
        "shard_index=0\nnum_shards=0\nmap_version=1\n",
        "shard_index=x\nnum_shards=2\nmap_version=1\n",
        "shard_index=0\nnum_shards=99999999999\nmap_version=1\n"}) {
    std::ofstream(path, std::ios::trunc) << text;
    EXPECT_THAT(ReadShardPlacement(files, dir.path()),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)))
        << text;
    // A damaged record is never replaced by the flags' placement.
    EXPECT_THAT(CheckShardPlacement(files, dir.path(), Placement(0, 2)),
                StatusIs(absl::StatusCode::kDataLoss));
  }
}

}  // namespace
}  // namespace strata
