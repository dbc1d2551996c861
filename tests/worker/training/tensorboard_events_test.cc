#include "worker/training/tensorboard_events.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ReadFileOrEmpty;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

TEST(TensorBoardEventsTest, ScalarEventIsTheProtoEncodingOfAnEvent) {
  // Event{wall_time: 1.5, step: 7, summary {value {tag: "a"
  // simple_value: 0.5}}}, field by field.
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xF8\x3F"  // 1: double 1.5
      "\x10\x07"                              // 2: varint 7
      "\x2A\x0A"                              // 5: Summary, 10 bytes
      "\x0A\x08"                              //   1: Value, 8 bytes
      "\x0A\x01\x61"                          //     1: "a"
      "\x15\x00\x00\x00\x3F",                 //     2: float 0.5
      23);
  EXPECT_EQ(ScalarEvent(7, 1.5, {{"a", 0.5f}}), expected);
}

TEST(TensorBoardEventsTest, FramesCarryLengthAndMaskedCrcs) {
  const std::string frame = TfRecordFrame("hello");
  ASSERT_EQ(frame.size(), 8u + 4u + 5u + 4u);
  EXPECT_EQ(Load64(frame.data()), 5u);
  EXPECT_EQ(Load32(frame.data() + 8),
            MaskedCrc32c(absl::string_view(frame.data(), 8)));
  EXPECT_EQ(frame.substr(12, 5), "hello");
  EXPECT_EQ(Load32(frame.data() + 17), MaskedCrc32c("hello"));
  // The mask: rotate right by 15, add 0xA282EAD8 (TFRecord's rule).
  EXPECT_EQ(MaskedCrc32c(""), 0xA282EAD8u);
}

TEST(TensorBoardEventsTest, WritesTheVersionThenOneRecordPerCall) {
  TempDir dir("tensorboard");
  const std::string folder = absl::StrCat(dir.path(), "/run/tb");
  auto events = TensorBoardEvents::Open(folder, 1000.25);
  ASSERT_THAT(events.status(), IsOk());
  ASSERT_THAT((*events)->AddScalars(3, 1001.0, {{"loss", 0.25f}}), IsOk());
  ASSERT_THAT(
      (*events)->AddScalars(4, 1002.0, {{"loss", 0.125f}, {"eval_auc", .75f}}),
      IsOk());
  EXPECT_THAT((*events)->path(),
              HasSubstr("/run/tb/events.out.tfevents.1000.strata-worker."));
  const std::string bytes = ReadFileOrEmpty((*events)->path());
  size_t at = 0;
  std::vector<std::string> records;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const uint64_t length = Load64(bytes.data() + at);
    ASSERT_LE(at + 16 + length, bytes.size());
    const std::string record = bytes.substr(at + 12, length);
    EXPECT_EQ(Load32(bytes.data() + at + 12 + length), MaskedCrc32c(record));
    records.push_back(record);
    at += 16 + length;
  }
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(records[0], HasSubstr("brain.Event:2"));
  EXPECT_EQ(records[1], ScalarEvent(3, 1001.0, {{"loss", 0.25f}}));
  EXPECT_EQ(records[2],
            ScalarEvent(4, 1002.0, {{"loss", 0.125f}, {"eval_auc", .75f}}));
}

TEST(TensorBoardEventsTest, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  TempDir dir("tensorboard");
  const std::string file = absl::StrCat(dir.path(), "/plain-file");
  ASSERT_TRUE(std::filesystem::create_directories(dir.path()) ||
              std::filesystem::exists(dir.path()));
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto events = TensorBoardEvents::Open(absl::StrCat(file, "/tb"), 1.0);
  EXPECT_THAT(events.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("--tensorboard_dir")));
}

}  // namespace
}  // namespace strata
