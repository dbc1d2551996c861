#include "embedding/initializer.h"

#include <cmath>

#include "common/hash.h"

namespace strata {
namespace {

// A counter-based generator: the i-th draw of a row depends on (row, i) only.
class RowRandom {
 public:
  explicit RowRandom(uint64_t row_seed) : row_seed_(row_seed) {}

  // Uniform in [0, 1) with 24 random bits.
  float NextUniform() {
    const uint64_t bits = Mix64(row_seed_ + 0x632BE59BD9B4E019ull * ++counter_);
    return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
  }

  // Standard normal by Box-Muller (one of the pair is used).
  double NextNormal() {
    double u1 = NextUniform();
    const double u2 = NextUniform();
    if (u1 < 1e-12) u1 = 1e-12;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t row_seed_;
  uint64_t counter_ = 0;
};

}  // namespace

Initializer::Initializer(const InitializerConfig& config, uint64_t seed)
    : config_(config), seed_(seed) {}

void Initializer::Fill(FeatureId key, uint32_t dim, float* out) const {
  switch (config_.type) {
    case InitializerType::kZeros:
      for (uint32_t i = 0; i < dim; ++i) out[i] = 0.0f;
      return;
    case InitializerType::kConstant:
      for (uint32_t i = 0; i < dim; ++i) out[i] = config_.value;
      return;
    case InitializerType::kUniform: {
      RowRandom random(Mix64(seed_ ^ Mix64(key)));
      const float span = config_.max - config_.min;
      for (uint32_t i = 0; i < dim; ++i) {
        out[i] = config_.min + span * random.NextUniform();
      }
      return;
    }
    case InitializerType::kTruncatedNormal: {
      RowRandom random(Mix64(seed_ ^ Mix64(key)));
      for (uint32_t i = 0; i < dim; ++i) {
        double z;
        do {
          z = random.NextNormal();
        } while (std::fabs(z) > 2.0);  // Redraw outside two stddevs.
        out[i] = static_cast<float>(config_.mean + config_.stddev * z);
      }
      return;
    }
  }
}

}  // namespace strata
