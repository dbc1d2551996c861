#include "common/huge_page_allocator.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using HugeVector = std::vector<float, HugePageAllocator<float>>;

// The VmFlags of the mapping in /proc/self/smaps that holds `address`
// ("" when none does).
std::string VmFlagsOf(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ');
    const std::vector<std::string> range = absl::StrSplit(fields[0], '-');
    uint64_t begin = 0, end = 0;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &begin) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      inside = begin <= target && target < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool HasHugePageAdvice(const void* address) {
  const std::vector<std::string> flags =
      absl::StrSplit(VmFlagsOf(address), ' ', absl::SkipEmpty());
  for (const std::string& flag : flags) {
    if (flag == "hg") return true;
  }
  return false;
}

class HugePageAllocatorTest : public ::testing::Test {
 protected:
  void TearDown() override { SetHugePagesEnabled(true); }
};

TEST_F(HugePageAllocatorTest, LargeArraysAreAlignedAndAdvised) {
  HugeVector rows(kHugePageMinBytes / sizeof(float) + 1);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % kHugePageBytes, 0u);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  EXPECT_EQ(rows[12345], 12345.0f);
  EXPECT_EQ(rows.back(), static_cast<float>(rows.size() - 1));
  EXPECT_TRUE(HasHugePageAdvice(rows.data())) << VmFlagsOf(rows.data());
}

TEST_F(HugePageAllocatorTest, GrowingKeepsTheValues) {
  HugeVector rows;
  for (int i = 0; i < 5'000'000; ++i) rows.push_back(static_cast<float>(i));
  EXPECT_EQ(rows[0], 0.0f);
  EXPECT_EQ(rows[4'999'999], 4999999.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % kHugePageBytes, 0u);
}

TEST_F(HugePageAllocatorTest, SmallArraysStayOnTheHeap) {
  HugeVector rows(1024, 1.5f);
  EXPECT_EQ(rows[1023], 1.5f);
  EXPECT_FALSE(HasHugePageAdvice(rows.data())) << VmFlagsOf(rows.data());
}

TEST_F(HugePageAllocatorTest, TurnedOffLargeArraysAreNotAdvised) {
  SetHugePagesEnabled(false);
  HugeVector rows(2 * kHugePageMinBytes / sizeof(float), 2.0f);
  EXPECT_EQ(rows[rows.size() / 2], 2.0f);
  EXPECT_FALSE(HasHugePageAdvice(rows.data())) << VmFlagsOf(rows.data());
}

TEST_F(HugePageAllocatorTest, AnImpossibleSizeThrowsBadAlloc) {
  HugePageAllocator<float> allocator;
  EXPECT_THROW(allocator.allocate(static_cast<size_t>(-1) / 2), std::bad_alloc);
}

}  // namespace
}  // namespace strata
