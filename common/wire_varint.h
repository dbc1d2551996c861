#ifndef STRATA_COMMON_WIRE_VARINT_H_
#define STRATA_COMMON_WIRE_VARINT_H_

#include <cstddef>
#include <cstdint>

namespace strata {

// Varints of protobuf's wire format, for the answers written by hand
// (common/pull_wire.h, serving/internal/lookup_wire.h).

// The bytes of a length written by WriteFixedVarint: enough for 2^35 - 1.
inline constexpr size_t kFixedVarintBytes = 5;

// Writes `value` (< 2^35) as a varint of exactly kFixedVarintBytes bytes
// (overlong encodings are valid protobuf), so that what follows it has a
// known offset before the value is known. Returns the end.
inline uint8_t* WriteFixedVarint(uint64_t value, uint8_t* out) {
  for (size_t i = 0; i + 1 < kFixedVarintBytes; ++i) {
    *out++ = static_cast<uint8_t>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<uint8_t>(value & 0x7F);
  return out;
}

// The most bytes WriteVarint takes for a uint32_t.
inline constexpr size_t kMaxVarint32Bytes = 5;

// Writes `value` as the shortest varint (at most 10 bytes). Returns the end.
inline uint8_t* WriteVarint(uint64_t value, uint8_t* out) {
  while (value >= 0x80) {
    *out++ = static_cast<uint8_t>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<uint8_t>(value);
  return out;
}

}  // namespace strata

#endif  // STRATA_COMMON_WIRE_VARINT_H_
