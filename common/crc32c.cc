#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// `p` times x modulo the polynomial, in the reflected order of the CRC's
// register (the coefficient of x^0 is the top bit): one bit of the
// register's step.
constexpr uint32_t TimesX(uint32_t p) {
  return (p & 1) ? (p >> 1) ^ kReflectedPolynomial : p >> 1;
}

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = TimesX(crc);
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
// Polynomials over GF(2) modulo the CRC's, in the register's reflected
// order (TimesX). A register `r` that then reads n more bytes holds
// r * x^(8n) plus what a zero register holds after those bytes, which is
// how separately computed pieces join.
constexpr uint32_t kOne = 0x80000000u;  // x^0

uint32_t MultiplyModPolynomial(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t coefficient = kOne; coefficient != 0; coefficient >>= 1) {
    if (a & coefficient) product ^= b;
    b = TimesX(b);
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial, by squaring.
uint32_t ShiftByBytes(uint64_t bytes) {
  uint32_t result = kOne;
  uint32_t power = 0x00800000u;  // x^8
  for (uint64_t rest = bytes; rest != 0; rest >>= 1) {
    if (rest & 1) result = MultiplyModPolynomial(result, power);
    power = MultiplyModPolynomial(power, power);
  }
  return result;
}

// The same polynomial as the table's: SSE4.2's crc32 computes CRC-32C.
__attribute__((target("sse4.2"))) uint64_t ExtendOneLane(
    uint64_t crc, const unsigned char* data, size_t words) {
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, data + i * sizeof(word), sizeof(word));
    crc = _mm_crc32_u64(crc, word);
  }
  return crc;
}

// Three lanes of a long input at once: the instruction takes 3 cycles to
// give its result and can start one a cycle, so one chain of them runs at
// a third of its speed. Below this size joining the lanes costs more than
// it saves.
constexpr size_t kThreeLaneMinBytes = size_t{64} << 10;

__attribute__((target("sse4.2"))) uint64_t ExtendThreeLanes(
    uint64_t crc, const unsigned char* data, size_t lane_words) {
  const size_t lane_bytes = lane_words * sizeof(uint64_t);
  const unsigned char* second = data + lane_bytes;
  const unsigned char* third = second + lane_bytes;
  uint64_t a = crc, b = 0, c = 0;
  for (size_t i = 0; i < lane_bytes; i += sizeof(uint64_t)) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, data + i, sizeof(wa));
    std::memcpy(&wb, second + i, sizeof(wb));
    std::memcpy(&wc, third + i, sizeof(wc));
    a = _mm_crc32_u64(a, wa);
    b = _mm_crc32_u64(b, wb);
    c = _mm_crc32_u64(c, wc);
  }
  const uint32_t shift = ShiftByBytes(lane_bytes);
  uint32_t joined = MultiplyModPolynomial(static_cast<uint32_t>(a), shift) ^
                    static_cast<uint32_t>(b);
  joined = MultiplyModPolynomial(joined, shift) ^ static_cast<uint32_t>(c);
  return joined;
}

__attribute__((target("sse4.2"))) uint32_t ExtendWithInstruction(
    uint32_t crc, const unsigned char* data, size_t size) {
  uint64_t wide = crc;
  const size_t words = size / sizeof(uint64_t);
  size_t done = 0;
  if (size >= kThreeLaneMinBytes) {
    const size_t lane_words = words / 3;
    wide = ExtendThreeLanes(wide, data, lane_words);
    done = 3 * lane_words;
  }
  wide = ExtendOneLane(wide, data + done * sizeof(uint64_t), words - done);
  uint32_t narrow = static_cast<uint32_t>(wide);
  for (size_t i = words * sizeof(uint64_t); i < size; ++i) {
    narrow = _mm_crc32_u8(narrow, data[i]);
  }
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
