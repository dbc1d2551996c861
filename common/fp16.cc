#include "common/fp16.h"

#include <cstring>

namespace strata {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) {  // Inf or NaN.
    const bool is_nan = abs_bits > 0x7F800000u;
    return static_cast<uint16_t>(sign | 0x7C00u | (is_nan ? 0x0200u : 0u));
  }
  if (abs_bits >= 0x477FF000u) {  // Rounds to a value past 65504: infinity.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs_bits < 0x38800000u) {  // Below the smallest normal half: subnormal.
    // Adding 0.5 makes the FPU do the round-to-nearest-even for us: the
    // half's subnormal step (2^-24) lands on the float's last mantissa bits.
    const float shifted = BitsToFloat(abs_bits) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3F000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa 23 -> 10.
  const uint32_t mantissa_odd = (abs_bits >> 13) & 1u;
  uint32_t rounded = abs_bits + 0xC8000FFFu + mantissa_odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1F) {
    return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude =
        static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

void FloatsToHalves(const float* in, size_t count, uint16_t* out) {
  for (size_t i = 0; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(const uint16_t* in, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace strata
