#include "common/fp16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

bool IsHalfNan(uint16_t half) {
  return (half & 0x7C00u) == 0x7C00u && (half & 0x03FFu) != 0;
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// binary16 decoded straight from its definition, in double.
double ReferenceHalfToDouble(uint16_t half) {
  const double sign = (half & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  if (exponent == 0x1F) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// binary32 -> binary16 by scaling to the half's unit in the last place and
// rounding half to even in double (exact: a float has 24 bits). REQUIRES:
// `value` is not NaN.
uint16_t ReferenceFloatToHalf(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 65520.0) return sign | 0x7C00u;
  if (magnitude == 0.0) return sign;
  int e;
  std::frexp(magnitude, &e);
  const int exponent = e - 1;  // magnitude is in [2^exponent, 2^(exponent+1)).
  if (exponent < -14) {
    // Subnormal; a carry to 1024 is the smallest normal, encoded the same.
    const double units = std::nearbyint(std::ldexp(magnitude, 24));
    return sign | static_cast<uint16_t>(units);
  }
  double units = std::nearbyint(std::ldexp(magnitude, 10 - exponent));
  int biased = exponent + 15;
  if (units == 2048.0) {
    units = 1024.0;
    ++biased;
  }
  return sign | static_cast<uint16_t>((biased << 10) |
                                      (static_cast<int>(units) - 1024));
}

TEST(Fp16Test, ExactValuesConvertExactly) {
  const struct {
    float value;
    uint16_t half;
  } cases[] = {
      {0.0f, 0x0000},      {-0.0f, 0x8000},           {1.0f, 0x3C00},
      {-1.0f, 0xBC00},     {-2.0f, 0xC000},           {0.5f, 0x3800},
      {1.5f, 0x3E00},      {0.333251953125f, 0x3555}, {65504.0f, 0x7BFF},
      {-65504.0f, 0xFBFF}, {0x1p-14f, 0x0400},        {0x1p-24f, 0x0001},
      {-0x1p-24f, 0x8001}, {0x3FFp-24f, 0x03FF},      {1.0009765625f, 0x3C01},
      {1024.0f, 0x6400},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(FloatToHalf(c.value), c.half) << c.value;
    EXPECT_EQ(Bits(HalfToFloat(c.half)), Bits(c.value)) << c.value;
  }
}

TEST(Fp16Test, NormalValuesRoundToNearestEven) {
  // Halfway between 0x3C00 (even) and 0x3C01: down to the even one.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);
  // Halfway between 0x3C01 and 0x3C02 (even): up.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);
  // Just off the halfway point: to the nearer one.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-23f), 0x3C01);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f - 0x1p-23f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-(1.0f + 3 * 0x1p-11f)), 0xBC02);
  // Halfway between 0x3FFF (odd) and 2.0: the carry moves the exponent.
  EXPECT_EQ(FloatToHalf(2.0f - 0x1p-11f), 0x4000);
  // Below 65520, the halfway point between 65504 and 65536: stays finite.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
}

TEST(Fp16Test, SubnormalsRoundToNearestEven) {
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);      // Halfway 0 / 1: to 0.
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);  // Halfway 1 / 2: to 2.
  EXPECT_EQ(FloatToHalf(0x1p-25f + 0x1p-35f), 0x0001);
  EXPECT_EQ(FloatToHalf(-3 * 0x1p-25f), 0x8002);
  // Halfway between 0x03FF and the smallest normal 0x0400 (even).
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
  EXPECT_EQ(FloatToHalf(-1e-10f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  for (uint16_t m = 1; m < 0x400; ++m) {
    EXPECT_EQ(HalfToFloat(m), std::ldexp(static_cast<float>(m), -24)) << m;
  }
}

TEST(Fp16Test, InfinitiesConvertBothWays) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(inf), 0x7C00);
  EXPECT_EQ(FloatToHalf(-inf), 0xFC00);
  EXPECT_EQ(HalfToFloat(0x7C00), inf);
  EXPECT_EQ(HalfToFloat(0xFC00), -inf);
}

TEST(Fp16Test, NanConvertsToNanBothWays) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(IsHalfNan(FloatToHalf(nan)));
  EXPECT_TRUE(IsHalfNan(FloatToHalf(-nan)));
  EXPECT_EQ(FloatToHalf(-nan) & 0x8000u, 0x8000u);
  // A signaling NaN whose payload lies below the bits a half keeps.
  EXPECT_TRUE(IsHalfNan(FloatToHalf(FromBits(0x7F800001u))));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xFFFF)));
}

TEST(Fp16Test, ValuesFrom65520OverflowToInfinity) {
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65536.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::max()), 0xFC00);
}

TEST(Fp16Test, EveryHalfDecodesExactlyAndRoundTrips) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float value = HalfToFloat(half);
    if (IsHalfNan(half)) {
      ASSERT_TRUE(std::isnan(value)) << h;
      const uint16_t back = FloatToHalf(value);
      ASSERT_TRUE(IsHalfNan(back)) << h;
      ASSERT_EQ(back & 0x8000u, half & 0x8000u) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), ReferenceHalfToDouble(half)) << h;
    ASSERT_EQ(std::signbit(value), (half & 0x8000u) != 0) << h;
    ASSERT_EQ(FloatToHalf(value), half) << h;
  }
}

TEST(Fp16Test, FloatsMatchReferenceRounding) {
  // A stride through every float bit pattern, plus the neighbours of every
  // halfway point between adjacent halves.
  std::vector<float> values;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4093) {
    values.push_back(FromBits(static_cast<uint32_t>(bits)));
  }
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double mid = (ReferenceHalfToDouble(static_cast<uint16_t>(h)) +
                        ReferenceHalfToDouble(static_cast<uint16_t>(h + 1))) /
                       2;
    const float halfway = static_cast<float>(mid);
    values.push_back(halfway);
    values.push_back(std::nextafter(halfway, 0.0f));
    values.push_back(std::nextafter(halfway, 1e9f));
    values.push_back(-halfway);
  }
  for (float value : values) {
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), ReferenceFloatToHalf(value))
        << "bits 0x" << std::hex << Bits(value);
  }
}

TEST(Fp16Test, BulkConversionsMatchScalarOnes) {
  const std::vector<float> in = {0.0f,     -1.5f,    0x1p-24f,
                                 65504.0f, 70000.0f, 3.14159f};
  std::vector<uint16_t> halves(in.size());
  FloatsToHalves(in.data(), in.size(), halves.data());
  std::vector<float> out(in.size());
  HalvesToFloats(halves.data(), halves.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(halves[i], FloatToHalf(in[i])) << i;
    EXPECT_EQ(Bits(out[i]), Bits(HalfToFloat(halves[i]))) << i;
  }
}

// The bulk conversions take F16C's eight-at-a-time path where the CPU has
// it: the same results as the scalar code over every half and a stride
// through every float (NaNs stay NaNs of the same sign), at every offset
// of the eight-value blocks.
TEST(Fp16Test, BulkConversionsMatchScalarOnesEverywhere) {
  std::vector<uint16_t> every_half(0x10000);
  for (uint32_t h = 0; h <= 0xFFFF; ++h)
    every_half[h] = static_cast<uint16_t>(h);
  std::vector<float> floats;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 65521) {
    floats.push_back(FromBits(static_cast<uint32_t>(bits)));
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    SCOPED_TRACE(offset);
    const size_t halves_count = every_half.size() - offset;
    std::vector<float> decoded(halves_count);
    HalvesToFloats(every_half.data() + offset, halves_count, decoded.data());
    for (size_t i = 0; i < halves_count; ++i) {
      const uint16_t half = every_half[offset + i];
      if (IsHalfNan(half)) {
        ASSERT_TRUE(std::isnan(decoded[i])) << half;
        ASSERT_EQ(std::signbit(decoded[i]), (half & 0x8000u) != 0) << half;
      } else {
        ASSERT_EQ(Bits(decoded[i]), Bits(HalfToFloat(half))) << half;
      }
    }
    const size_t floats_count = floats.size() - offset;
    std::vector<uint16_t> encoded(floats_count);
    FloatsToHalves(floats.data() + offset, floats_count, encoded.data());
    for (size_t i = 0; i < floats_count; ++i) {
      const float value = floats[offset + i];
      if (std::isnan(value)) {
        ASSERT_TRUE(IsHalfNan(encoded[i])) << Bits(value);
        ASSERT_EQ(encoded[i] & 0x8000u, std::signbit(value) ? 0x8000u : 0u);
      } else {
        ASSERT_EQ(encoded[i], FloatToHalf(value)) << Bits(value);
      }
    }
  }
}

}  // namespace
}  // namespace strata
