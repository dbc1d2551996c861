#include "bench/zipf_sampler.h"

#include <cmath>

namespace strata {
namespace bench {
namespace {

// log1p(x) / x, continuous at 0.
double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x
                            : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

// expm1(x) / x, continuous at 0.
double Helper2(double x) {
  return std::abs(x) > 1e-8
             ? std::expm1(x) / x
             : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), exponent_(s) {
  h_integral_x1_ = HIntegral(1.5) - 1;
  h_integral_n_ = HIntegral(static_cast<double>(n_) + 0.5);
  s_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1 - exponent_) * log_x) * log_x;
}

double ZipfSampler::H(double x) const {
  return std::exp(-exponent_ * std::log(x));
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1 - exponent_);
  if (t < -1) t = -1;  // Rounding can push t just past the domain.
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(std::mt19937_64& engine) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  while (true) {
    // u is uniform in (h_integral_x1_, h_integral_n_].
    const double u =
        h_integral_n_ + uniform(engine) * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    // Ranks are 1-based in the paper.
    const double rounded = std::floor(x + 0.5);
    const uint64_t k = rounded < 1 ? 1
                       : rounded >= static_cast<double>(n_)
                           ? n_
                           : static_cast<uint64_t>(rounded);
    const double kd = static_cast<double>(k);
    if (kd - x <= s_ || u >= HIntegral(kd + 0.5) - H(kd)) return k - 1;
  }
}

}  // namespace bench
}  // namespace strata
