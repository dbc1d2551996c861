#ifndef STRATA_TESTS_WORKER_DATA_TEST_FILES_H_
#define STRATA_TESTS_WORKER_DATA_TEST_FILES_H_

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace strata {
namespace testing {

// A fresh directory for the running test: <TempDir>/<suite>.<test>.<pid>.
inline std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/", info->test_suite_name(), ".",
                   info->name(), ".", getpid());
  const std::string command =
      absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_WORKER_DATA_TEST_FILES_H_
