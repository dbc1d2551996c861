#ifndef STRATA_WORKER_DATA_RANDOM_H_
#define STRATA_WORKER_DATA_RANDOM_H_

#include <cstdint>

#include "common/hash.h"

namespace strata {

// Deterministic random numbers for synthetic data: the same sequence on every
// platform and standard library (std::*_distribution are not), so a seed
// always writes the same bytes. Not thread-safe; cheap to create per row.
class SplitMix64Rng {
 public:
  explicit SplitMix64Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return Mix64(state_ - 0x9E3779B97F4A7C15ull);
  }
  // Uniform in (0, 1): never 0 or 1, so log() of it is finite.
  double Uniform() { return ToUnit(Next()); }
  // Standard normal (Box-Muller; uses two uniforms).
  double Normal();

  // Maps 64 random bits to (0, 1).
  static double ToUnit(uint64_t bits) {
    // 52 bits, not 53: (2^53 - 0.5) * 2^-53 would round to 1.
    return (static_cast<double>(bits >> 12) + 0.5) * 0x1.0p-52;
  }

 private:
  uint64_t state_;
};

// Samples k in 1..n with P(k) proportional to k^-s (s > 0), in O(1) expected
// time and no tables, by rejection-inversion (W. Hörmann, G. Derflinger,
// "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996; as in Apache Commons RNG). Immutable; thread-safe.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, s > 0.
  ZipfSampler(uint64_t n, double s);

  uint64_t Sample(SplitMix64Rng& rng) const;

  uint64_t n() const { return n_; }
  double s() const { return s_; }

 private:
  double H(double x) const;
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;

  uint64_t n_;
  double s_;
  double h_integral_x1_;
  double h_integral_n_;
  double squeeze_;
};

// A bijection on 32 bits (xor-shifts by 16 undo themselves and odd
// multipliers have inverses mod 2^32): synthetic categorical values are
// written as Mix32(rank + key), so the values of a field never collide.
uint32_t Mix32(uint32_t x);
uint32_t Unmix32(uint32_t x);

// Uniform in [-sqrt(3), sqrt(3)) from 64 random bits: mean 0, variance 1.
double UnitVarianceUniform(uint64_t bits);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_RANDOM_H_
