#ifndef STRATA_WORKER_MODEL_INTERNAL_CPU_KERNELS_H_
#define STRATA_WORKER_MODEL_INTERNAL_CPU_KERNELS_H_

#include <cstddef>
#include <vector>

namespace strata {
namespace model_internal {

// The CPU model's inner loops outside the GEMMs. On x86-64 each is built
// for AVX-512 (x86-64-v4), for AVX2+FMA (x86-64-v3) and for the baseline,
// and the first call picks the best one this CPU runs; elsewhere only the
// portable one.

// Floats between rows of a feature-major array of `batch` examples: n
// rounded up to 16 (the kernels' blocks) and 16 more, so that rows are not
// a power-of-two bytes apart, where the rows a loop walks together would
// all fall in the same few cache sets.
inline int FeatureMajorStride(int batch) { return (batch + 15) / 16 * 16 + 16; }

// The dot interaction of a batch stored feature-major: vt holds count x dim
// rows of n values, `stride` floats apart (stride >= n rounded up to 16;
// the padding columns must be readable and are written with garbage) (row a *
// dim + d = component d of vector a of every example). Writes the count *
// (count - 1) / 2 pairs a < b, in order (0,1), (0,2), .., (count-2, count-1),
// as rows of n values each.
void DotInteractionBatch(const float* vt, int count, int dim, int n,
                         size_t stride, float* dots);

// dvt (same layout as vt) = d<v_a, v_b> / dv for the pairs' gradients
// `ddots` (same layout as DotInteractionBatch's output). Every row of dvt is
// written (columns [0, n rounded up to 16)), so dvt need not be zeroed.
void DotInteractionBackwardBatch(const float* vt, const float* ddots, int count,
                                 int dim, int n, size_t stride, float* dvt);

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows and
// c < cols: the model's copies between example-major and feature-major
// arrays. Moved as 4 x 4 blocks in SSE registers where x86 has them; a loop
// of one float per load and store was a tenth of a training step.
void TransposeFloats(const float* src, size_t src_stride, int rows, int cols,
                     float* dst, size_t dst_stride);

// One build of both kernels, for tests that check each build this CPU runs.
struct InteractionKernels {
  const char* name;  // "x86-64-v4", "x86-64-v3" or "baseline".
  void (*forward)(const float* vt, int count, int dim, int n, size_t stride,
                  float* dots);
  void (*backward)(const float* vt, const float* ddots, int count, int dim,
                   int n, size_t stride, float* dvt);
};

// The builds this CPU runs, the one the functions above use first.
const std::vector<InteractionKernels>& SupportedInteractionKernels();

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_CPU_KERNELS_H_
