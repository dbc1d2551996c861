#include "common/crc32c.h"

#include <algorithm>
#include <cstdint>
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

// The bitwise definition, to check the fast paths against.
uint32_t BitwiseCrc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
  }
  return crc ^ 0xFFFFFFFFu;
}

TEST(Crc32cTest, AgreesWithTheDefinitionAtEveryLengthAndAlignment) {
  std::string data;
  uint32_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 1103515245u + 12345u;
    data.push_back(static_cast<char>(state >> 16));
  }
  for (size_t start = 0; start < 9; ++start) {
    for (size_t size : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255}) {
      const std::string piece = data.substr(start, size);
      EXPECT_EQ(Crc32c(piece), BitwiseCrc32c(piece))
          << "start " << start << ", size " << size;
    }
  }
}

TEST(Crc32cTest, ExtendingEqualsTheCrcOfTheWhole) {
  const std::string whole = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= whole.size(); ++cut) {
    const uint32_t first = Crc32c(whole.substr(0, cut));
    EXPECT_EQ(Crc32cExtend(first, whole.data() + cut, whole.size() - cut),
              Crc32c(whole))
        << "cut at " << cut;
  }
  EXPECT_EQ(Crc32cExtend(0, whole.data(), whole.size()), Crc32c(whole));
}

// Long inputs take three lanes joined at the end; pieces under 64 KiB take
// one. Both must give the CRC of the whole, whatever the length's rest.
TEST(Crc32cTest, LongInputsEqualTheirPiecesExtendedOneByOne) {
  std::string data;
  uint32_t state = 777;
  for (size_t i = 0; i < (size_t{1} << 20) + 40; ++i) {
    state = state * 1103515245u + 12345u;
    data.push_back(static_cast<char>(state >> 16));
  }
  for (size_t size :
       {size_t{64} << 10, (size_t{64} << 10) + 23, (size_t{192} << 10) + 8,
        size_t{1} << 20, (size_t{1} << 20) + 37}) {
    for (size_t start : {0, 3}) {
      uint32_t by_pieces = 0;
      for (size_t done = 0; done < size; done += 1000) {
        by_pieces = Crc32cExtend(by_pieces, data.data() + start + done,
                                 std::min<size_t>(1000, size - done));
      }
      EXPECT_EQ(Crc32c(absl::string_view(data.data() + start, size)), by_pieces)
          << "start " << start << ", size " << size;
    }
  }
  // And one long input against the bitwise definition.
  const std::string long_piece = data.substr(5, (size_t{200} << 10) + 13);
  EXPECT_EQ(Crc32c(long_piece), BitwiseCrc32c(long_piece));
}

}  // namespace
}  // namespace strata
