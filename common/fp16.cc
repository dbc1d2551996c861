#include "common/fp16.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

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

#if defined(__x86_64__)
namespace {

// F16C converts eight values an instruction, rounding to nearest even as
// FloatToHalf does; the scalar code takes about as long per value as a
// serving lookup spends copying it. Built for F16C whatever the compiler's
// target, and called only where the CPU has it.
__attribute__((target("avx,f16c"))) void FloatsToHalvesF16c(const float* in,
                                                            size_t count,
                                                            uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
  }
  for (; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

__attribute__((target("avx,f16c"))) void HalvesToFloatsF16c(const uint16_t* in,
                                                            size_t count,
                                                            float* out) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
  }
  for (; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

// CPUID says F16C and AVX, and the OS saves the AVX registers (XCR0 bits
// 1 and 2). (Clang 14's __builtin_cpu_supports does not know "f16c".)
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned needed = bit_OSXSAVE | bit_AVX | bit_F16C;
  if ((ecx & needed) != needed) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & 6u) == 6u;
}

bool HasF16c() {
  static const bool has = CpuHasF16c();
  return has;
}

}  // namespace
#endif

void FloatsToHalves(const float* in, size_t count, uint16_t* out) {
#if defined(__x86_64__)
  if (HasF16c()) return FloatsToHalvesF16c(in, count, out);
#endif
  for (size_t i = 0; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(const uint16_t* in, size_t count, float* out) {
#if defined(__x86_64__)
  if (HasF16c()) return HalvesToFloatsF16c(in, count, out);
#endif
  for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace strata
