#ifndef STRATA_COMMON_FLOAT_BOUNDS_H_
#define STRATA_COMMON_FLOAT_BOUNDS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace strata {

// Whether every value is finite and at most `bound` in magnitude (`bound`
// finite and not negative; the float's largest finite value checks for
// inf and NaN only). It compares bit patterns: a float's magnitude bits
// (sign cleared) order as its magnitude does, and infinities and NaNs lie
// above every finite bound. Fixed-size blocks with no exit inside let the
// compiler check each block with a few vector instructions; one value at
// a time took 6% of a shard's time under 8192-key pushes, and half of the
// staging loop's own time in a group push.
inline bool AllMagnitudesAtMost(absl::Span<const float> values, float bound) {
  int32_t bound_bits;
  std::memcpy(&bound_bits, &bound, sizeof(bound_bits));
  constexpr size_t kBlock = 64;
  const float* data = values.data();
  size_t i = 0;
  for (; i + kBlock <= values.size(); i += kBlock) {
    // Negative once any magnitude passes the bound (both lie in
    // [0, 2^31), so the difference cannot overflow).
    int32_t over = 0;
    for (size_t k = 0; k < kBlock; ++k) {
      int32_t bits;
      std::memcpy(&bits, data + i + k, sizeof(bits));
      over |= bound_bits - (bits & 0x7fffffff);
    }
    if (over < 0) return false;
  }
  for (; i < values.size(); ++i) {
    if (!(std::fabs(data[i]) <= bound)) return false;
  }
  return true;
}

}  // namespace strata

#endif  // STRATA_COMMON_FLOAT_BOUNDS_H_
