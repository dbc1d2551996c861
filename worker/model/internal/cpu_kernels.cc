#include "worker/model/internal/cpu_kernels.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cpu_versions.h"

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

// Each kernel is built for x86-64-v4, x86-64-v3 and the baseline where
// common/cpu_versions.h says so. The versions differ in more than their
// instructions (the v4 one holds a block in one register and keeps more sums
// at once), so they are written out rather than left to target_clones. The
// helpers below are STRATA_ALWAYS_INLINE, so that each version inlines its
// own.

namespace strata {
namespace model_internal {

namespace {

// Examples per block: 16 floats, one AVX-512 register or two AVX ones.
constexpr int kBlock = 16;

// Index of pair (a, b), a < b, in (0,1), (0,2), .., (count-2, count-1).
STRATA_ALWAYS_INLINE size_t PairIndex(int a, int b, int count) {
  return static_cast<size_t>(a) * count - static_cast<size_t>(a) * (a + 1) / 2 +
         (b - a - 1);
}

// GCC vector extensions. A vector wider than the target's registers is
// split by the compiler, but 16 floats on an AVX2 target were split so
// badly (the kernels ran 5x slower) that the AVX2 and baseline versions
// hold a block as two halves of 8.
typedef float Float8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Float16 __attribute__((vector_size(16 * sizeof(float))));

// A block's 16 floats, one example a lane, as two halves. Every lane sums
// the same terms in the same order in either representation.
struct Halves8 {
  Float8 lo, hi;

  static STRATA_ALWAYS_INLINE Halves8 Load(const float* p) {
    Halves8 v;
    std::memcpy(&v.lo, p, sizeof(v.lo));
    std::memcpy(&v.hi, p + 8, sizeof(v.hi));
    return v;
  }
  STRATA_ALWAYS_INLINE void Store(float* p) const {
    std::memcpy(p, &lo, sizeof(lo));
    std::memcpy(p + 8, &hi, sizeof(hi));
  }
  STRATA_ALWAYS_INLINE void AddProduct(const Halves8& x, const Halves8& y) {
    lo += x.lo * y.lo;
    hi += x.hi * y.hi;
  }
};

// The same block in one vector, for the AVX-512 version.
struct Whole16 {
  Float16 v;

  static STRATA_ALWAYS_INLINE Whole16 Load(const float* p) {
    Whole16 w;
    std::memcpy(&w.v, p, sizeof(w.v));
    return w;
  }
  STRATA_ALWAYS_INLINE void Store(float* p) const {
    std::memcpy(p, &v, sizeof(v));
  }
  STRATA_ALWAYS_INLINE void AddProduct(const Whole16& x, const Whole16& y) {
    v += x.v * y.v;
  }
};

// A block's rows of vt, copied next to each other (row r at r * kBlock).
//
// Why: in vt, rows are `stride` floats apart, and the rows of one component
// of the count vectors are dim rows apart. With dim = 16, those rows fall
// in only 4 of the L1 cache's 64 sets whatever the stride, so the kernels'
// reads kept evicting each other. Copied, the block's rows fill the sets
// evenly.
class CompactBlock {
 public:
  explicit CompactBlock(size_t rows)
      : storage_(rows * kBlock + kBlock),
        data_(storage_.data() +
              (kBlock - reinterpret_cast<uintptr_t>(storage_.data()) /
                            sizeof(float) % kBlock) %
                  kBlock),
        rows_(rows) {}

  // Copies columns [first, first + kBlock) of vt's rows.
  STRATA_ALWAYS_INLINE void CopyFrom(const float* vt, size_t stride,
                                     size_t first) {
    // The next block's piece of each row (one cache line on) is fetched
    // ahead: the hardware does not follow hundreds of rows walked at once.
    const bool next_in_row = first + 2 * kBlock <= stride;
    for (size_t r = 0; r < rows_; ++r) {
      const float* row = vt + r * stride + first;
      if (next_in_row) __builtin_prefetch(row + kBlock);
      std::memcpy(data_ + r * kBlock, row, kBlock * sizeof(float));
    }
  }
  STRATA_ALWAYS_INLINE const float* row(size_t r) const {
    return data_ + r * kBlock;
  }

 private:
  std::vector<float> storage_;
  float* data_;  // 64-byte aligned, in storage_.
  size_t rows_;
};

// The dots of pairs (a, b), .., (a, b + kPairs - 1) for one full block: a's
// component is loaded once for kPairs products rather than once for each.
template <typename V, int kPairs>
STRATA_ALWAYS_INLINE void DotPairs(const CompactBlock& block, int a, int b,
                                   int dim, size_t stride, float* first_out) {
  V sums[kPairs] = {};
  for (int d = 0; d < dim; ++d) {
    const V xa = V::Load(block.row(a * dim + d));
    for (int k = 0; k < kPairs; ++k) {
      sums[k].AddProduct(xa, V::Load(block.row((b + k) * dim + d)));
    }
  }
  for (int k = 0; k < kPairs; ++k) sums[k].Store(first_out + k * stride);
}

// One full block of kBlock examples starting at column `first`; the sums
// live in registers. The pairs of one a are consecutive output rows.
template <typename V, int kPairsAtOnce>
STRATA_ALWAYS_INLINE void DotBlock(const CompactBlock& block, int count,
                                   int dim, size_t stride, size_t first,
                                   float* dots) {
  size_t pair = 0;
  for (int a = 0; a < count; ++a) {
    int b = a + 1;
    for (; b + kPairsAtOnce <= count; b += kPairsAtOnce, pair += kPairsAtOnce) {
      DotPairs<V, kPairsAtOnce>(block, a, b, dim, stride,
                                dots + pair * stride + first);
    }
    for (; b < count; ++b, ++pair) {
      DotPairs<V, 1>(block, a, b, dim, stride, dots + pair * stride + first);
    }
  }
}

// The batch is processed in blocks of kBlock columns; the arrays' stride
// leaves room to round the last block up (padding columns are computed and
// ignored).
template <typename V, int kPairsAtOnce>
STRATA_ALWAYS_INLINE void Forward(const float* vt, int count, int dim, int n,
                                  size_t stride, float* dots) {
  CompactBlock block(static_cast<size_t>(count) * dim);
  for (int first = 0; first < n; first += kBlock) {
    block.CopyFrom(vt, stride, first);
    DotBlock<V, kPairsAtOnce>(block, count, dim, stride, first, dots);
  }
}

// dv_a[d, d + kComponents) = sum over b != a of g_ab v_b for one full
// block, in one pass over the pairs of a: each pair's gradient g_ab is
// loaded once per kComponents components rather than once per component.
// `pair_offsets[b]` is where the row of pair (a, b) starts in ddots.
template <typename V, int kComponents>
STRATA_ALWAYS_INLINE void DotBackwardComponents(
    const CompactBlock& block, const float* ddots, const size_t* pair_offsets,
    int count, int a, int dim, int d, size_t stride, size_t first, float* dvt) {
  V sums[kComponents] = {};
  for (int b = 0; b < count; ++b) {
    if (b == a) continue;
    const V g = V::Load(ddots + pair_offsets[b] + first);
    for (int k = 0; k < kComponents; ++k) {
      sums[k].AddProduct(g, V::Load(block.row(b * dim + d + k)));
    }
  }
  for (int k = 0; k < kComponents; ++k) {
    sums[k].Store(dvt + (a * dim + d + k) * stride + first);
  }
}

// dv_a = sum over b != a of g_ab v_b for one full block; each output row
// is written once. `pair_offsets` (count x count) holds the start of pair
// (a, b)'s row in ddots at [a * count + b].
//
// The loop runs over the components outside and the vectors inside, so
// that what one chunk of components reads (those components of every
// vector and the pairs' gradients, 29 KB for the default model) can stay
// in the L1 cache.
template <typename V, int kComponentsAtOnce>
STRATA_ALWAYS_INLINE void DotBackwardBlock(const CompactBlock& block,
                                           const float* ddots, int count,
                                           int dim, size_t stride, size_t first,
                                           const size_t* pair_offsets,
                                           float* dvt) {
  int d = 0;
  for (; d + kComponentsAtOnce <= dim; d += kComponentsAtOnce) {
    for (int a = 0; a < count; ++a) {
      DotBackwardComponents<V, kComponentsAtOnce>(
          block, ddots, pair_offsets + a * count, count, a, dim, d, stride,
          first, dvt);
    }
  }
  for (; d < dim; ++d) {
    for (int a = 0; a < count; ++a) {
      DotBackwardComponents<V, 1>(block, ddots, pair_offsets + a * count, count,
                                  a, dim, d, stride, first, dvt);
    }
  }
}

template <typename V, int kComponentsAtOnce>
STRATA_ALWAYS_INLINE void Backward(const float* vt, const float* ddots,
                                   int count, int dim, int n, size_t stride,
                                   float* dvt) {
  std::vector<size_t> pair_offsets(static_cast<size_t>(count) * count);
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      if (b == a) continue;
      pair_offsets[a * count + b] =
          (a < b ? PairIndex(a, b, count) : PairIndex(b, a, count)) * stride;
    }
  }
  CompactBlock block(static_cast<size_t>(count) * dim);
  for (int first = 0; first < n; first += kBlock) {
    block.CopyFrom(vt, stride, first);
    DotBackwardBlock<V, kComponentsAtOnce>(block, ddots, count, dim, stride,
                                           first, pair_offsets.data(), dvt);
  }
}

// The versions. How many sums each keeps at once: enough independent sums
// to cover the FMA's latency, few enough to stay in registers (16 AVX
// registers of 8 floats, 32 AVX-512 ones of 16; the baseline's SSE ones
// spill either way). Blocking pairs by 4 and components by 4 takes 10 AVX
// registers; by 8, 9 AVX-512 ones.

void ForwardBaseline(const float* vt, int count, int dim, int n, size_t stride,
                     float* dots) {
  Forward<Halves8, 4>(vt, count, dim, n, stride, dots);
}

void BackwardBaseline(const float* vt, const float* ddots, int count, int dim,
                      int n, size_t stride, float* dvt) {
  Backward<Halves8, 4>(vt, ddots, count, dim, n, stride, dvt);
}

#if STRATA_X86_VERSIONS
__attribute__((target("arch=x86-64-v3"))) void ForwardV3(const float* vt,
                                                         int count, int dim,
                                                         int n, size_t stride,
                                                         float* dots) {
  Forward<Halves8, 4>(vt, count, dim, n, stride, dots);
}

__attribute__((target("arch=x86-64-v3"))) void BackwardV3(const float* vt,
                                                          const float* ddots,
                                                          int count, int dim,
                                                          int n, size_t stride,
                                                          float* dvt) {
  Backward<Halves8, 4>(vt, ddots, count, dim, n, stride, dvt);
}

__attribute__((target("arch=x86-64-v4"))) void ForwardV4(const float* vt,
                                                         int count, int dim,
                                                         int n, size_t stride,
                                                         float* dots) {
  Forward<Whole16, 8>(vt, count, dim, n, stride, dots);
}

__attribute__((target("arch=x86-64-v4"))) void BackwardV4(const float* vt,
                                                          const float* ddots,
                                                          int count, int dim,
                                                          int n, size_t stride,
                                                          float* dvt) {
  Backward<Whole16, 8>(vt, ddots, count, dim, n, stride, dvt);
}
#endif

std::vector<InteractionKernels> FindSupportedKernels() {
  std::vector<InteractionKernels> kernels;
#if STRATA_X86_VERSIONS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) {
    kernels.push_back({"x86-64-v4", ForwardV4, BackwardV4});
  }
  if (__builtin_cpu_supports("x86-64-v3")) {
    kernels.push_back({"x86-64-v3", ForwardV3, BackwardV3});
  }
#endif
  kernels.push_back({"baseline", ForwardBaseline, BackwardBaseline});
  return kernels;
}

const InteractionKernels& BestKernels() {
  static const InteractionKernels best = SupportedInteractionKernels().front();
  return best;
}

}  // namespace

const std::vector<InteractionKernels>& SupportedInteractionKernels() {
  static const std::vector<InteractionKernels>* const kernels =
      new std::vector<InteractionKernels>(FindSupportedKernels());
  return *kernels;
}

namespace {

// The floats of rows [first_row, rows) and columns [first_col, cols) that
// the blocks did not move, one at a time.
void TransposeRest(const float* src, size_t src_stride, int first_row, int rows,
                   int first_col, int cols, float* dst, size_t dst_stride) {
  for (int r = first_row; r < rows; ++r) {
    for (int c = first_col; c < cols; ++c) {
      dst[c * dst_stride + r] = src[r * src_stride + c];
    }
  }
}

}  // namespace

void TransposeFloats(const float* src, size_t src_stride, int rows, int cols,
                     float* dst, size_t dst_stride) {
#if defined(__SSE2__)
  const int block_rows = rows / 4 * 4;
  const int block_cols = cols / 4 * 4;
  for (int r = 0; r < block_rows; r += 4) {
    const float* in = src + r * src_stride;
    for (int c = 0; c < block_cols; c += 4) {
      __m128 row0 = _mm_loadu_ps(in + c);
      __m128 row1 = _mm_loadu_ps(in + src_stride + c);
      __m128 row2 = _mm_loadu_ps(in + 2 * src_stride + c);
      __m128 row3 = _mm_loadu_ps(in + 3 * src_stride + c);
      _MM_TRANSPOSE4_PS(row0, row1, row2, row3);
      float* out = dst + c * dst_stride + r;
      _mm_storeu_ps(out, row0);
      _mm_storeu_ps(out + dst_stride, row1);
      _mm_storeu_ps(out + 2 * dst_stride, row2);
      _mm_storeu_ps(out + 3 * dst_stride, row3);
    }
  }
  TransposeRest(src, src_stride, 0, block_rows, block_cols, cols, dst,
                dst_stride);
  TransposeRest(src, src_stride, block_rows, rows, 0, cols, dst, dst_stride);
#else
  TransposeRest(src, src_stride, 0, rows, 0, cols, dst, dst_stride);
#endif
}

void DotInteractionBatch(const float* vt, int count, int dim, int n,
                         size_t stride, float* dots) {
  BestKernels().forward(vt, count, dim, n, stride, dots);
}

void DotInteractionBackwardBatch(const float* vt, const float* ddots, int count,
                                 int dim, int n, size_t stride, float* dvt) {
  BestKernels().backward(vt, ddots, count, dim, n, stride, dvt);
}

}  // namespace model_internal
}  // namespace strata
