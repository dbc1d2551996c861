#ifndef STRATA_BENCH_ZIPF_SAMPLER_H_
#define STRATA_BENCH_ZIPF_SAMPLER_H_

#include <cstdint>
#include <random>

namespace strata {
namespace bench {

// Draws ranks 0..n-1 with P(k) proportional to 1 / (k + 1)^s, by
// rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996): O(1)
// memory and expected O(1) time per draw for any n and any s > 0, s = 1
// included. Rank 0 is the most frequent. Not thread-safe (the caller owns
// the random engine).
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, s > 0.
  ZipfSampler(uint64_t n, double s);

  uint64_t Sample(std::mt19937_64& engine) const;

 private:
  // H(x) = integral of h(x) = x^-s, written to stay accurate near s = 1.
  double HIntegral(double x) const;
  double H(double x) const;
  double HIntegralInverse(double x) const;

  uint64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace bench
}  // namespace strata

#endif  // STRATA_BENCH_ZIPF_SAMPLER_H_
