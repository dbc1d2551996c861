#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? (crc >> 1) ^ kReflectedPolynomial : crc >> 1;
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t ExtendWithTable(uint32_t crc, const unsigned char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    crc = kTable[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  }
  return crc;
}

#if defined(__x86_64__)
// The same polynomial as the table's: SSE4.2's crc32 computes CRC-32C.
__attribute__((target("sse4.2"))) uint32_t ExtendWithInstruction(
    uint32_t crc, const unsigned char* data, size_t size) {
  uint64_t wide = crc;
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= size; i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, data + i, sizeof(word));
    wide = _mm_crc32_u64(wide, word);
  }
  uint32_t narrow = static_cast<uint32_t>(wide);
  for (; i < size; ++i) narrow = _mm_crc32_u8(narrow, data[i]);
  return narrow;
}

bool HasCrcInstruction() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc ^= 0xFFFFFFFFu;
#if defined(__x86_64__)
  if (HasCrcInstruction()) {
    return ExtendWithInstruction(crc, bytes, size) ^ 0xFFFFFFFFu;
  }
#endif
  return ExtendWithTable(crc, bytes, size) ^ 0xFFFFFFFFu;
}

uint32_t Crc32c(absl::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

}  // namespace strata
