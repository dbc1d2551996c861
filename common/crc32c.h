#ifndef STRATA_COMMON_CRC32C_H_
#define STRATA_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace strata {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the TFRecord
// framing of TensorBoard event files checks it. Crc32c("123456789") is
// 0xE3069283. Uses the CPU's crc32 instruction where it has one (SSE4.2):
// about 8 bytes in 3 cycles, and 8 a cycle in three lanes past 64 KiB;
// otherwise a table, about 1 byte a cycle.
uint32_t Crc32c(absl::string_view data);

// The CRC-32C of the bytes that gave `crc` followed by `size` more bytes at
// `data`: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b), and Crc32c(a) is
// Crc32cExtend(0, a).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

}  // namespace strata

#endif  // STRATA_COMMON_CRC32C_H_
