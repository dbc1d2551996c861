#include "embedding/initializer.h"

#include <cmath>

#include "common/cpu_versions.h"
#include "common/hash.h"

// glibc's vector math library (libmvec): log and cos of two (SSE) or eight
// (AVX-512) doubles at once, dispatched by glibc to the CPU's best
// implementation of that width. Its results are within 4 ulp of the
// correctly rounded ones, like the scalar functions' (within 1 ulp): the
// floats drawn differ from the scalar path's at most in their last bit, and
// rarely.
#if defined(__GLIBC__) && defined(__x86_64__) && defined(STRATA_HAVE_LIBMVEC)
#include <immintrin.h>
extern "C" __m128d _ZGVbN2v_log(__m128d);
extern "C" __m128d _ZGVbN2v_cos(__m128d);
#define STRATA_VECTOR_NORMALS 1
// The AVX-512 path where common/cpu_versions.h builds x86 versions.
#if STRATA_X86_VERSIONS
extern "C" __m512d _ZGVeN8v_log(__m512d);
extern "C" __m512d _ZGVeN8v_cos(__m512d);
#define STRATA_AVX512_NORMALS 1
#endif
#endif

namespace strata {
namespace {

// Uniform draw `counter` (from 1) of the row whose seed is `row_seed`: in
// [0, 1) with 24 random bits. A counter-based generator: the i-th draw of a
// row depends on (row, i) only.
STRATA_ALWAYS_INLINE float UniformAt(uint64_t row_seed, uint64_t counter) {
  const uint64_t bits = Mix64(row_seed + 0x632BE59BD9B4E019ull * counter);
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// Standard normals by Box-Muller, kNormalsAtOnce at a time (one of each pair
// is used), draw by draw the same as a one-at-a-time generator: normal k of
// a call whose draws start after `counter` takes uniforms counter + 2k + 1
// and counter + 2k + 2.
constexpr int kNormalsAtOnce = 8;

STRATA_ALWAYS_INLINE void DrawUniformPairs(uint64_t row_seed, uint64_t counter,
                                           double* u1, double* angle) {
  for (int k = 0; k < kNormalsAtOnce; ++k) {
    u1[k] = UniformAt(row_seed, counter + 2 * k + 1);
    if (u1[k] < 1e-12) u1[k] = 1e-12;
    angle[k] = 6.283185307179586 *
               static_cast<double>(UniformAt(row_seed, counter + 2 * k + 2));
  }
}

void NormalsBaseline(uint64_t row_seed, uint64_t counter, double* z) {
  double u1[kNormalsAtOnce], angle[kNormalsAtOnce];
  DrawUniformPairs(row_seed, counter, u1, angle);
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

#ifdef STRATA_AVX512_NORMALS
// The same draws, with the uniforms' 64-bit multiplies vectorized (AVX-512
// has them) and one call each of the eight-wide log and cos: about 0.6x the
// SSE path's time per row (BM_InitializerFill), where new rows were a tenth
// of a training shard's CPU.
__attribute__((target("arch=x86-64-v4"))) void NormalsV4(uint64_t row_seed,
                                                         uint64_t counter,
                                                         double* z) {
  double u1[kNormalsAtOnce], angle[kNormalsAtOnce];
  DrawUniformPairs(row_seed, counter, u1, angle);
  const __m512d log_u1 = _ZGVeN8v_log(_mm512_loadu_pd(u1));
  const __m512d twice = _mm512_mul_pd(_mm512_set1_pd(-2.0), log_u1);
  // The masked form with every lane set: GCC 12 warns that the unmasked
  // one's undefined pass-through is uninitialized.
  const __m512d radius = _mm512_mask_sqrt_pd(twice, 0xFF, twice);
  _mm512_storeu_pd(z,
                   _mm512_mul_pd(radius, _ZGVeN8v_cos(_mm512_loadu_pd(angle))));
}
#endif

using NormalsFunction = void (*)(uint64_t, uint64_t, double*);

NormalsFunction BestNormals() {
#ifdef STRATA_AVX512_NORMALS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return NormalsV4;
#endif
  return NormalsBaseline;
}

// A row's draws, kNormalsAtOnce normals at a time.
class RowRandom {
 public:
  explicit RowRandom(uint64_t row_seed) : row_seed_(row_seed) {}

  float NextUniform() { return UniformAt(row_seed_, ++counter_); }

  void NextNormals(double* z) {
    static const NormalsFunction normals = BestNormals();
    normals(row_seed_, counter_, z);
    counter_ += 2 * kNormalsAtOnce;
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
      double z[kNormalsAtOnce];
      uint32_t i = 0;
      while (i < dim) {
        random.NextNormals(z);
        for (int k = 0; k < kNormalsAtOnce && i < dim; ++k) {
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
