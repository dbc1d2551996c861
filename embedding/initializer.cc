#include "embedding/initializer.h"

#include <cmath>

#include "common/hash.h"

// glibc's vector math library (libmvec): log and cos of two doubles at once,
// dispatched by glibc to the CPU's widest implementation. Its results are
// within 4 ulp of the correctly rounded ones, like the scalar functions'
// (within 1 ulp): the floats drawn differ from the scalar path's at most in
// their last bit, and rarely.
#if defined(__GLIBC__) && defined(__x86_64__) && defined(STRATA_HAVE_LIBMVEC)
#include <emmintrin.h>
extern "C" __m128d _ZGVbN2v_log(__m128d);
extern "C" __m128d _ZGVbN2v_cos(__m128d);
#define STRATA_VECTOR_NORMALS 1
#endif

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

  // Standard normals by Box-Muller (one of each pair is used), draw by draw
  // the same as kNormalsAtOnce calls of a one-at-a-time generator: normal k
  // takes uniforms 2k and 2k + 1.
  static constexpr int kNormalsAtOnce = 8;
  void NextNormals(double* z) {
    double u1[kNormalsAtOnce], angle[kNormalsAtOnce];
    for (int k = 0; k < kNormalsAtOnce; ++k) {
      u1[k] = NextUniform();
      if (u1[k] < 1e-12) u1[k] = 1e-12;
      angle[k] = 6.283185307179586 * static_cast<double>(NextUniform());
    }
#ifdef STRATA_VECTOR_NORMALS
    for (int k = 0; k < kNormalsAtOnce; k += 2) {
      const __m128d radius = _mm_sqrt_pd(
          _mm_mul_pd(_mm_set1_pd(-2.0), _ZGVbN2v_log(_mm_loadu_pd(u1 + k))));
      _mm_storeu_pd(z + k,
                    _mm_mul_pd(radius, _ZGVbN2v_cos(_mm_loadu_pd(angle + k))));
    }
#else
    for (int k = 0; k < kNormalsAtOnce; ++k) {
      z[k] = std::sqrt(-2.0 * std::log(u1[k])) * std::cos(angle[k]);
    }
#endif
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
      // A batch of normals at a time (the log and cos of Box-Muller were
      // most of a new row's cost); the draws past the last value a row
      // takes are dropped, so the values are those of one at a time.
      RowRandom random(Mix64(seed_ ^ Mix64(key)));
      double z[RowRandom::kNormalsAtOnce];
      uint32_t i = 0;
      while (i < dim) {
        random.NextNormals(z);
        for (int k = 0; k < RowRandom::kNormalsAtOnce && i < dim; ++k) {
          // Redraw outside two stddevs.
          if (std::fabs(z[k]) > 2.0) continue;
          out[i++] = static_cast<float>(config_.mean + config_.stddev * z[k]);
        }
      }
      return;
    }
  }
}

}  // namespace strata
