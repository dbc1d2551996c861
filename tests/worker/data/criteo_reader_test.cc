#include "worker/data/criteo_reader.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/worker/data/test_files.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::strata::testing::WriteTextFile;
using ::testing::HasSubstr;

// A valid line whose I1 is `id` (so examples can be told apart after
// reading) and whose label is id % 2.
std::string Line(int id) {
  return absl::StrCat(id % 2, "\t", id, "\t-2\t\t7", std::string(10, '\t'),
                      "0000000a\t", std::string(24, '\t'), "ffffffff\n");
}

// Recovers the id of a read example from I1 = log1p(id).
int IdOf(const Batch& batch, size_t i) {
  return static_cast<int>(
      std::lround(std::expm1(static_cast<double>(batch.dense[i * 13]))));
}

std::vector<int> ReadIds(CriteoReader& reader) {
  std::vector<int> ids;
  Batch batch;
  while (true) {
    EXPECT_THAT(reader.ReadBatch(&batch), IsOk());
    if (batch.size() == 0) return ids;
    for (size_t i = 0; i < batch.size(); ++i) ids.push_back(IdOf(batch, i));
  }
}

TEST(CriteoReaderTest, ReadsBatchesAcrossFilesUntilTheEpochEnds) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  WriteTextFile(dir + "/a", Line(0) + Line(1) + Line(2));
  WriteTextFile(dir + "/b", Line(3) + Line(4));  // no trailing newline below
  WriteTextFile(dir + "/c", Line(5).substr(0, Line(5).size() - 1));
  CriteoReaderOptions options;
  options.files = {dir + "/a", dir + "/b", dir + "/c"};
  options.batch_size = 4;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  Batch batch;
  ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
  ASSERT_EQ(batch.size(), 4u);
  EXPECT_EQ(batch.dense.size(), 4u * kCriteoNumDense);
  EXPECT_EQ(batch.keys.size(), 4u * kCriteoNumCategorical);
  EXPECT_EQ(batch.labels, (std::vector<float>{0, 1, 0, 1}));
  // Example 1: I1 = 1, I2 = -2 -> 0, I3 empty, I4 = 7, C1 = a, C26 = ffffffff.
  EXPECT_EQ(batch.dense[13 + 0], static_cast<float>(std::log1p(1.0)));
  EXPECT_EQ(batch.dense[13 + 1], 0.0f);
  EXPECT_EQ(batch.dense[13 + 2], 0.0f);
  EXPECT_EQ(batch.dense[13 + 3], static_cast<float>(std::log1p(7.0)));
  EXPECT_EQ(batch.keys[26 + 0], CriteoFeatureKey(0, 0xa));
  EXPECT_EQ(batch.keys[26 + 1], CriteoMissingKey(1));
  EXPECT_EQ(batch.keys[26 + 25], CriteoFeatureKey(25, 0xffffffff));
  ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(IdOf(batch, 0), 4);
  EXPECT_EQ(IdOf(batch, 1), 5);
  ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
  EXPECT_EQ(batch.size(), 0u);
  ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
  EXPECT_EQ(batch.size(), 0u);  // stays at the end until the next epoch
  EXPECT_EQ(reader->stats().examples, 6);

  ASSERT_THAT(reader->StartNextEpoch(), IsOk());
  EXPECT_EQ(reader->epoch(), 1);
  EXPECT_EQ(ReadIds(*reader), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reader->stats().examples, 12);
}

TEST(CriteoReaderTest, MultiHotLinesKeepTheirKeysPerExampleAndField) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  const std::string tabs(14, '\t');
  // Example 0: C1 = a, b; example 1: plain; example 2: C2 = c, c, d.
  WriteTextFile(dir + "/a", "1" + tabs + "0000000a,0000000b\n" + Line(1) + "0" +
                                tabs + "\t0000000c,0000000c,0000000d\n");
  CriteoReaderOptions options;
  options.files = {dir + "/a"};
  options.batch_size = 2;  // examples 0 and 1, then 2
  const uint32_t n = kCriteoNumCategorical;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  Batch batch;
  ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_EQ(batch.field_offsets.size(), 2 * n + 1);
  EXPECT_EQ(batch.keys.size(), 2 * n + 1);
  EXPECT_EQ(batch.field_offsets[1], 2u);  // C1 of example 0: a, b
  EXPECT_EQ(batch.keys[0], CriteoFeatureKey(0, 0xa));
  EXPECT_EQ(batch.keys[1], CriteoFeatureKey(0, 0xb));
  EXPECT_EQ(batch.field_offsets[n], n + 1);  // example 1 starts there
  EXPECT_EQ(batch.keys[n + 1], CriteoFeatureKey(0, 0xa));  // Line(1)'s C1

  // ReadAllCriteoExamples joins batches, offsets rebased.
  options.batch_size = 1;
  STRATA_ASSERT_OK_AND_ASSIGN(Batch all, ReadAllCriteoExamples(options));
  ASSERT_EQ(all.size(), 3u);
  ASSERT_EQ(all.field_offsets.size(), 3 * n + 1);
  EXPECT_EQ(all.keys.size(), 3 * n + 3);
  const uint32_t c2 = all.field_offsets[2 * n + 1];
  EXPECT_EQ(all.field_offsets[2 * n + 2] - c2, 3u);
  EXPECT_EQ(all.keys[c2], CriteoFeatureKey(1, 0xc));
  EXPECT_EQ(all.keys[c2 + 2], CriteoFeatureKey(1, 0xd));
  EXPECT_EQ(all.field_offsets.back(), all.keys.size());

  // A range of it is the same examples again.
  Batch tail;
  tail.AppendRange(all, 1, 3);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail.field_offsets.front(), 0u);
  EXPECT_EQ(tail.keys.size(), 2 * n + 2);
  EXPECT_EQ(tail.keys[tail.field_offsets[n + 1] + 1], CriteoFeatureKey(1, 0xc));
}

TEST(CriteoReaderTest, CrlfFilesReadLikeLfFiles) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  std::string lf, crlf;
  for (int id = 0; id < 3; ++id) {
    lf += Line(id);
    std::string line = Line(id);
    line.insert(line.size() - 1, "\r");
    crlf += line;
  }
  WriteTextFile(dir + "/lf", lf);
  WriteTextFile(dir + "/crlf", crlf);
  CriteoReaderOptions options;
  options.files = {dir + "/lf"};
  STRATA_ASSERT_OK_AND_ASSIGN(Batch a, ReadAllCriteoExamples(options));
  options.files = {dir + "/crlf"};
  options.strict = true;
  STRATA_ASSERT_OK_AND_ASSIGN(Batch b, ReadAllCriteoExamples(options));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.keys, b.keys);
}

// One line of each kind of damage, between good lines 0..5.
std::string DamagedFile() {
  return Line(0) + "2\t1\n" + Line(1) + "1\tabc\n" + Line(2) + "1" +
         std::string(14, '\t') + "nothex!!\n" + Line(3) + "0" +
         std::string(41, '\t') + "\n" + Line(4) + "\n" + Line(5);
}

TEST(CriteoReaderTest, MalformedLinesAreCountedAndSkippedByDefault) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  WriteTextFile(dir + "/damaged", DamagedFile());
  CriteoReaderOptions options;
  options.files = {dir + "/damaged"};
  options.batch_size = 2;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  EXPECT_EQ(ReadIds(*reader), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  const CriteoReaderStats& stats = reader->stats();
  EXPECT_EQ(stats.lines, 11);
  EXPECT_EQ(stats.examples, 6);
  EXPECT_EQ(stats.malformed, 5);
  auto count = [&](CriteoLineError e) {
    return stats.malformed_by_kind[static_cast<int>(e)];
  };
  EXPECT_EQ(count(CriteoLineError::kBadLabel), 2);  // "2" and an empty line
  EXPECT_EQ(count(CriteoLineError::kBadInteger), 1);
  EXPECT_EQ(count(CriteoLineError::kBadCategorical), 1);
  EXPECT_EQ(count(CriteoLineError::kTooManyFields), 1);
}

TEST(CriteoReaderTest, StrictModeStopsAtTheFirstMalformedLineNamingIt) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  const std::string path = dir + "/damaged";
  WriteTextFile(path, DamagedFile());
  CriteoReaderOptions options;
  options.files = {path};
  options.strict = true;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  Batch batch;
  EXPECT_THAT(reader->ReadBatch(&batch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(path + ":2: label '2' is not 0 or 1")));

  // Each kind, alone in a file after a good line.
  const std::pair<std::string, std::string> kinds[] = {
      {"1\tabc\n", ":2: I1 'abc' is not an integer"},
      {"1" + std::string(14, '\t') + "nothex!!\n", ":2: C1 'nothex!!'"},
      {"0" + std::string(41, '\t') + "\n", ":2: more than 40 fields"},
  };
  for (const auto& [bad_line, message] : kinds) {
    WriteTextFile(path, Line(0) + bad_line + Line(1));
    STRATA_ASSERT_OK_AND_ASSIGN(auto strict, CriteoReader::Open(options));
    EXPECT_THAT(strict->ReadBatch(&batch),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(path + message)));
  }
}

TEST(CriteoReaderTest, LineShardsCoverEveryLineExactlyOnce) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  std::vector<std::string> files;
  int id = 0;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int i = 0; i < 7 + 4 * f; ++i) text += Line(id++);
    text += "bad line\n";  // malformed lines are shared out too
    files.push_back(absl::StrCat(dir, "/part", f));
    WriteTextFile(files.back(), text);
  }
  for (int world_size : {1, 2, 3, 5}) {
    std::map<int, int> seen;
    int64_t lines = 0;
    int64_t malformed = 0;
    for (int rank = 0; rank < world_size; ++rank) {
      CriteoReaderOptions options;
      options.files = files;
      options.batch_size = 4;
      options.rank = rank;
      options.world_size = world_size;
      STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
      for (int read : ReadIds(*reader)) ++seen[read];
      lines += reader->stats().lines;
      malformed += reader->stats().malformed;
    }
    EXPECT_EQ(lines, id + 3) << world_size;
    EXPECT_EQ(malformed, 3) << world_size;
    ASSERT_EQ(seen.size(), static_cast<size_t>(id)) << world_size;
    for (const auto& [read, times] : seen) EXPECT_EQ(times, 1) << read;
  }
}

TEST(CriteoReaderTest, FileShardsCoverEveryFileExactlyOnce) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  std::vector<std::string> files;
  for (int f = 0; f < 4; ++f) {
    files.push_back(absl::StrCat(dir, "/part", f));
    WriteTextFile(files.back(), Line(2 * f) + Line(2 * f + 1));
  }
  CriteoReaderOptions options;
  options.files = files;
  options.world_size = 2;
  options.shard_by = CriteoReaderOptions::ShardBy::kFiles;
  options.rank = 1;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  EXPECT_EQ(ReadIds(*reader), (std::vector<int>{2, 3, 6, 7}));
  options.world_size = 5;
  options.rank = 4;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 4 of 5 gets none of the 4 files")));
}

TEST(CriteoReaderTest, BadOptionsAndMissingFilesAreErrors) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  WriteTextFile(dir + "/a", Line(0));
  CriteoReaderOptions options;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.files = {dir + "/a"};
  options.batch_size = 0;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.batch_size = 1;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  options.rank = 0;
  options.files.push_back(dir + "/missing");
  EXPECT_THAT(
      CriteoReader::Open(options),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir + "/missing")));
  options.files = {dir};  // a directory opens but cannot be read
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  Batch batch;
  EXPECT_THAT(reader->ReadBatch(&batch),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cannot read")));
}

TEST(CriteoReaderTest, CountCriteoLinesCountsNonEmptyLinesUpToTheLimit) {
  const TempDir temp_dir("criteo_reader");
  const std::string& dir = temp_dir.path();
  WriteTextFile(dir + "/a", "1\tx\n0\ty\n\n1\tz");  // 3, the last unended
  WriteTextFile(dir + "/b", "0\tw\n");
  auto all = CountCriteoLines({dir + "/a", dir + "/b"}, 100);
  ASSERT_THAT(all.status(), IsOk());
  EXPECT_EQ(*all, 4);
  auto capped = CountCriteoLines({dir + "/a", dir + "/b"}, 2);
  ASSERT_THAT(capped.status(), IsOk());
  EXPECT_EQ(*capped, 2);
  EXPECT_THAT(CountCriteoLines({dir + "/missing"}, 10).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

}  // namespace
}  // namespace strata
