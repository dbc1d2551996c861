#ifndef STRATA_WORKER_MODEL_INTERNAL_CUDA_DENSE_KERNELS_H_
#define STRATA_WORKER_MODEL_INTERNAL_CUDA_DENSE_KERNELS_H_

// The kernels of the CUDA dense model (cuda_dense_kernels.cu), one per piece
// of the CPU model's math that is not a matrix product. Plain C++ so that
// g++ compiles the callers. Every matrix is row-major in device memory. Each
// launcher queues its kernel on `stream` and returns the launch error, not
// the kernel's outcome (that surfaces at the next synchronization). A launch
// over zero elements queues nothing.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace strata {
namespace model_internal {

// Where example i's pooled fields come from: field f of example i pools the
// embedding rows rows[k] for k in [offsets[i * fields + f],
// offsets[i * fields + f + 1]), as in ModelBatch.
struct PoolingShape {
  int batch = 0;
  int fields = 0;
  int dim = 0;        // embedding_dim
  bool mean = false;  // Pooling::kMean (divide by the row count when > 1)
};

// y[i][o] = y[i][o] + bias[o], then max(., 0) if relu; y is rows x cols.
cudaError_t LaunchAddBiasRelu(float* y, const float* bias, int rows, int cols,
                              bool relu, cudaStream_t stream);

// grad[k] = 0 where y[k] <= 0 (the ReLU's derivative), for k < count.
cudaError_t LaunchReluMask(const float* y, float* grad, size_t count,
                           cudaStream_t stream);

// x[k] = value for k < count.
cudaError_t LaunchFill(float* x, size_t count, float value,
                       cudaStream_t stream);

// vectors (batch x (fields + 1) x dim) = for each example the bottom MLP's
// output (batch x dim) followed by its pooled fields; embeddings is
// num_rows x dim.
cudaError_t LaunchPoolEmbeddings(const PoolingShape& shape, const float* bottom,
                                 const float* embeddings,
                                 const uint32_t* offsets, const uint32_t* rows,
                                 float* vectors, cudaStream_t stream);

// The dot interaction of `count` vectors of `dim` per example:
// z[i] = (v[i][0], <v[i][a], v[i][b]> for each pair p, a = pair_first[p] <
// b = pair_second[p], in the order a, then b). z is batch x (dim + pairs).
cudaError_t LaunchDotInteraction(const float* vectors, const int* pair_first,
                                 const int* pair_second, int batch, int count,
                                 int dim, int pairs, float* z,
                                 cudaStream_t stream);

// d(vectors) from dz = d(z) of LaunchDotInteraction (pairs in the same
// order); dv is batch x count x dim and is overwritten.
cudaError_t LaunchDotInteractionBackward(const float* vectors, const float* dz,
                                         int batch, int count, int dim,
                                         float* dv, cudaStream_t stream);

// Per example of the batch: probabilities = sigmoid(logits), losses = the
// sigmoid cross-entropy max(x, 0) - x y + log(1 + e^-|x|), and
// logit_grads = p - y (the gradient of the summed loss).
cudaError_t LaunchLogisticLoss(const float* logits, const float* labels,
                               int batch, float* probabilities, float* losses,
                               float* logit_grads, cudaStream_t stream);

// probabilities = sigmoid(logits).
cudaError_t LaunchSigmoid(const float* logits, int batch, float* probabilities,
                          cudaStream_t stream);

// row_grads[rows[k]] += scale * d(pooled field) for every row pooled by a
// field, scale being 1 / count for kMean with count > 1, else 1. vector_grads
// is batch x (fields + 1) x dim (the first vector is the bottom output's);
// row_grads (num_rows x dim) must be zeroed first. Atomic adds: the order of
// the sums over a row's occurrences is not fixed.
cudaError_t LaunchScatterRowGradients(const PoolingShape& shape,
                                      const float* vector_grads,
                                      const uint32_t* offsets,
                                      const uint32_t* rows, float* row_grads,
                                      cudaStream_t stream);

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_CUDA_DENSE_KERNELS_H_
