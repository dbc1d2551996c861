#include "worker/model/internal/cpu_kernels.h"

#include <cstring>
#include <vector>

// GCC builds a function with this attribute once per listed target (here
// x86-64-v3: AVX2 and FMA) and
// resolves the call at load time (an ifunc). Sanitizer builds keep one
// version: ASan and ifunc resolvers do not mix well.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define STRATA_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STRATA_MULTIVERSION
#endif

// The helpers below must be inlined into each version of their caller:
// called out of line, they would run as the baseline build whatever the CPU.
#if defined(__GNUC__)
#define STRATA_KERNEL_INLINE inline __attribute__((always_inline))
#else
#define STRATA_KERNEL_INLINE inline
#endif

namespace strata {
namespace model_internal {

namespace {

// Examples per block: 16 floats are two AVX registers, and a block of every
// vector (count x dim x 16 floats, 27 KB for the default model) stays in
// the L1 cache while the pairs are formed.
constexpr int kBlock = 16;

// Index of pair (a, b), a < b, in (0,1), (0,2), .., (count-2, count-1).
STRATA_KERNEL_INLINE size_t PairIndex(int a, int b, int count) {
  return static_cast<size_t>(a) * count - static_cast<size_t>(a) * (a + 1) / 2 +
         (b - a - 1);
}

// Eight floats as one value (GCC vector extension): AVX registers in the
// x86-64-v3 version, pairs of SSE registers in the baseline one.
typedef float Float8 __attribute__((vector_size(32)));

STRATA_KERNEL_INLINE Float8 Load8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

STRATA_KERNEL_INLINE void Store8(float* p, Float8 v) {
  std::memcpy(p, &v, sizeof(v));
}

// One full block of kBlock examples starting at column `first`; the sums
// live in registers.
STRATA_KERNEL_INLINE void DotBlock(const float* vt, int count, int dim,
                                   size_t stride, size_t first, float* dots) {
  size_t pair = 0;
  for (int a = 0; a < count; ++a) {
    for (int b = a + 1; b < count; ++b, ++pair) {
      Float8 lo = {}, hi = {};
      for (int d = 0; d < dim; ++d) {
        const float* xa = vt + (a * dim + d) * stride + first;
        const float* xb = vt + (b * dim + d) * stride + first;
        lo += Load8(xa) * Load8(xb);
        hi += Load8(xa + 8) * Load8(xb + 8);
      }
      float* out = dots + pair * stride + first;
      Store8(out, lo);
      Store8(out + 8, hi);
    }
  }
}

// dv_a[d, d + kComponents) = sum over b != a of g_ab v_b for one full
// block, in one pass over the pairs of a: each pair's gradient g_ab is
// loaded once per kComponents components rather than once per component.
template <int kComponents>
STRATA_KERNEL_INLINE void DotBackwardComponents(const float* vt,
                                                const float* const* pair_rows,
                                                int count, int a, int dim,
                                                int d, size_t stride,
                                                size_t first, float* dvt) {
  Float8 lo[kComponents] = {}, hi[kComponents] = {};
  for (int b = 0; b < count; ++b) {
    if (b == a) continue;
    const Float8 g_lo = Load8(pair_rows[b]);
    const Float8 g_hi = Load8(pair_rows[b] + 8);
    const float* xb = vt + (b * dim + d) * stride + first;
    for (int k = 0; k < kComponents; ++k) {
      lo[k] += g_lo * Load8(xb + k * stride);
      hi[k] += g_hi * Load8(xb + k * stride + 8);
    }
  }
  for (int k = 0; k < kComponents; ++k) {
    float* out = dvt + (a * dim + d + k) * stride + first;
    Store8(out, lo[k]);
    Store8(out + 8, hi[k]);
  }
}

// Components summed at once: 4 x 2 sums and the two halves of g_ab take 10
// of the 16 AVX registers.
constexpr int kComponentsAtOnce = 4;

// dv_a = sum over b != a of g_ab v_b for one full block; each output row
// is written once. `pair_rows` has room for `count` pointers.
STRATA_KERNEL_INLINE void DotBackwardBlock(const float* vt, const float* ddots,
                                           int count, int dim, size_t stride,
                                           size_t first,
                                           const float** pair_rows,
                                           float* dvt) {
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      if (b == a) continue;
      const size_t pair =
          a < b ? PairIndex(a, b, count) : PairIndex(b, a, count);
      pair_rows[b] = ddots + pair * stride + first;
    }
    int d = 0;
    for (; d + kComponentsAtOnce <= dim; d += kComponentsAtOnce) {
      DotBackwardComponents<kComponentsAtOnce>(vt, pair_rows, count, a, dim, d,
                                               stride, first, dvt);
    }
    for (; d < dim; ++d) {
      DotBackwardComponents<1>(vt, pair_rows, count, a, dim, d, stride, first,
                               dvt);
    }
  }
}

}  // namespace

// The batch is processed in blocks of kBlock columns; the arrays' stride
// leaves room to round the last block up (padding columns are computed and
// ignored).
STRATA_MULTIVERSION
void DotInteractionBatch(const float* vt, int count, int dim, int n,
                         size_t stride, float* dots) {
  for (int first = 0; first < n; first += kBlock) {
    DotBlock(vt, count, dim, stride, first, dots);
  }
}

STRATA_MULTIVERSION
void DotInteractionBackwardBatch(const float* vt, const float* ddots, int count,
                                 int dim, int n, size_t stride, float* dvt) {
  std::vector<const float*> pair_rows(count);
  for (int first = 0; first < n; first += kBlock) {
    DotBackwardBlock(vt, ddots, count, dim, stride, first, pair_rows.data(),
                     dvt);
  }
}

}  // namespace model_internal
}  // namespace strata
