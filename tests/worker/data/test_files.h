#ifndef STRATA_TESTS_WORKER_DATA_TEST_FILES_H_
#define STRATA_TESTS_WORKER_DATA_TEST_FILES_H_

#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace testing {

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
