#include "worker/data/random.h"

#include <cmath>

namespace strata {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kSqrt3 = 1.7320508075688772;
constexpr uint32_t kMul1 = 0x7FEB352Du;
constexpr uint32_t kMul2 = 0x846CA68Bu;

constexpr uint32_t InverseMod32(uint32_t a) {
  uint32_t x = a;  // correct to 3 bits for odd a; each step doubles that
  for (int i = 0; i < 5; ++i) x *= 2u - a * x;
  return x;
}

// log1p(x) / x and expm1(x) / x, continuous at 0.
double Helper1(double x) {
  if (std::fabs(x) > 1e-8) return std::log1p(x) / x;
  return 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

double Helper2(double x) {
  if (std::fabs(x) > 1e-8) return std::expm1(x) / x;
  return 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

}  // namespace

uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= kMul1;
  x ^= x >> 16;
  x *= kMul2;
  return x ^ (x >> 16);
}

uint32_t Unmix32(uint32_t x) {
  x ^= x >> 16;
  x *= InverseMod32(kMul2);
  x ^= x >> 16;
  x *= InverseMod32(kMul1);
  return x ^ (x >> 16);
}

double UnitVarianceUniform(uint64_t bits) {
  return (2 * SplitMix64Rng::ToUnit(bits) - 1) * kSqrt3;
}

double SplitMix64Rng::Normal() {
  const double u1 = Uniform();
  const double u2 = Uniform();
  return std::sqrt(-2 * std::log(u1)) * std::cos(kTwoPi * u2);
}

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
  h_integral_x1_ = HIntegral(1.5) - 1;
  h_integral_n_ = HIntegral(static_cast<double>(n_) + 0.5);
  squeeze_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

// h(x) = x^-s, the unnormalized density.
double ZipfSampler::H(double x) const { return std::exp(-s_ * std::log(x)); }

// An antiderivative of h: (x^(1-s) - 1) / (1 - s), also for s near 1.
double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1 - s_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding can push t past its limit
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(SplitMix64Rng& rng) const {
  const double max_k = static_cast<double>(n_);
  while (true) {
    const double u =
        h_integral_n_ + rng.Uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1) {
      k = 1;
    } else if (k > max_k) {
      k = max_k;
    }
    // Accept when k is in the squeeze region or under the density.
    if (k - x <= squeeze_ || u >= HIntegral(k + 0.5) - H(k)) {
      return static_cast<uint64_t>(k);
    }
  }
}

}  // namespace strata
