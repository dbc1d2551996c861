#ifndef STRATA_COMMON_FP16_H_
#define STRATA_COMMON_FP16_H_

#include <cstddef>
#include <cstdint>

namespace strata {

// IEEE 754 binary16 <-> binary32, round to nearest even, with infinities,
// NaN and subnormals.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);

// Bulk versions over `count` values. `out` must have room for them.
void FloatsToHalves(const float* in, size_t count, uint16_t* out);
void HalvesToFloats(const uint16_t* in, size_t count, float* out);

}  // namespace strata

#endif  // STRATA_COMMON_FP16_H_
