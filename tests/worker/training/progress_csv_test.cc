#include "worker/training/progress_csv.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

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

std::string Contents(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(ProgressCsvTest, HeaderOnceThenOneLinePerReportAcrossRestarts) {
  TempDir dir("progress_csv_test");
  const std::string path = dir.path() + "/progress.csv";
  {
    auto csv = ProgressCsv::Open(path);
    ASSERT_THAT(csv, IsOk());
    (*csv)->Append(10, 0, 10240, 1.5, 6826.7, 0.693147, false, 0, 0);
    (*csv)->Append(20, 0, 20480, 3.0, 6826.7, 0.5, true, 0.75, 0.48);
    // Flushed as written: a reader sees both lines while the run goes on.
    EXPECT_EQ(Contents(path),
              std::string(ProgressCsv::kHeader) +
                  "\n10,0,10240,1.500,6826.7,0.693147,,\n"
                  "20,0,20480,3.000,6826.7,0.500000,0.750000,0.480000\n");
  }
  // A restored run appends, without a second header.
  auto again = ProgressCsv::Open(path);
  ASSERT_THAT(again, IsOk());
  (*again)->Append(30, 1, 10240, 1.0, 10240, 0.4, false, 0, 0);
  const std::string text = Contents(path);
  EXPECT_EQ(text.find("step,"), 0u);
  EXPECT_EQ(text.rfind("step,"), 0u);
  EXPECT_THAT(text, HasSubstr("\n30,1,10240,1.000,10240.0,0.400000,,\n"));
}

TEST(ProgressCsvTest, AnUnwritablePathIsAnErrorNamingIt) {
  EXPECT_THAT(ProgressCsv::Open("/nonexistent-dir/progress.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/nonexistent-dir/progress.csv")));
}

}  // namespace
}  // namespace strata
