#include "common/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  EXPECT_EQ(Crc32c(""), 0x00000000u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, and of 0xFF.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
}

}  // namespace
}  // namespace strata
