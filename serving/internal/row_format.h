#ifndef STRATA_SERVING_INTERNAL_ROW_FORMAT_H_
#define STRATA_SERVING_INTERNAL_ROW_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "embedding/storage_format.h"
#include "embedding/table_config.h"

namespace strata {
namespace serving_internal {

// Row keys are the training store's (embedding/storage_format.h).
using ::strata::kRowKeyBytes;
using ::strata::ParseRowKey;
using ::strata::RowKey;

// A serving row's value is its dim float32 followed by a stamp: the shard it
// came from (uint32) and the snapshot epoch it was written in (uint64),
// little-endian.
inline constexpr size_t kStampBytes = 12;

inline void AppendStamp(uint32_t shard, uint64_t epoch, std::string* out) {
  char buf[kStampBytes];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(shard >> (8 * i));
  for (int i = 0; i < 8; ++i) buf[4 + i] = static_cast<char>(epoch >> (8 * i));
  out->append(buf, sizeof(buf));
}

// Reads the stamp at the end of `value`; false when it is too short.
inline bool ParseStamp(absl::string_view value, uint32_t* shard,
                       uint64_t* epoch) {
  if (value.size() < kStampBytes) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(value.data()) +
                  value.size() - kStampBytes;
  *shard = 0;
  *epoch = 0;
  for (int i = 3; i >= 0; --i) *shard = (*shard << 8) | p[i];
  for (int i = 7; i >= 0; --i) *epoch = (*epoch << 8) | p[4 + i];
  return true;
}

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_ROW_FORMAT_H_
