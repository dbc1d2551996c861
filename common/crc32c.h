#ifndef STRATA_COMMON_CRC32C_H_
#define STRATA_COMMON_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace strata {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the TFRecord
// framing of TensorBoard event files checks it. Crc32c("123456789") is
// 0xE3069283. Table-driven, about 1 byte a cycle: for small records, not
// bulk data.
uint32_t Crc32c(absl::string_view data);

}  // namespace strata

#endif  // STRATA_COMMON_CRC32C_H_
