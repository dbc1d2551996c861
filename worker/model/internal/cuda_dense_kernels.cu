// Kernels of the CUDA dense model. Each thread computes one output value
// with the same arithmetic, in the same order, as the loops of
// cpu_dense_model.cc, so that the two models agree to float rounding (the
// matrix products, done by BLAS on both sides, are the difference).

#include <algorithm>

#include "worker/model/internal/cuda_dense_kernels.h"

namespace strata {
namespace model_internal {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; grid-stride loops cover the rest.
constexpr size_t kMaxBlocks = size_t{1} << 16;

int Blocks(size_t count) {
  return static_cast<int>(
      std::min((count + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ size_t GridStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// ReLU as std::max(v, 0.0f) computes it.
__device__ float Relu(float v) { return v < 0.0f ? 0.0f : v; }

__global__ void AddBiasReluKernel(float* y, const float* bias, size_t count,
                                  int cols, bool relu) {
  for (size_t k = FirstIndex(); k < count; k += GridStride()) {
    const float v = y[k] + bias[k % cols];
    y[k] = relu ? Relu(v) : v;
  }
}

__global__ void ReluMaskKernel(const float* y, float* grad, size_t count) {
  for (size_t k = FirstIndex(); k < count; k += GridStride()) {
    if (y[k] <= 0.0f) grad[k] = 0.0f;
  }
}

__global__ void FillKernel(float* x, size_t count, float value) {
  for (size_t k = FirstIndex(); k < count; k += GridStride()) x[k] = value;
}

// One thread per (example, vector, d).
__global__ void PoolEmbeddingsKernel(PoolingShape shape, const float* bottom,
                                     const float* embeddings,
                                     const uint32_t* offsets,
                                     const uint32_t* rows, float* vectors) {
  const int dim = shape.dim;
  const int count = shape.fields + 1;
  const size_t total = static_cast<size_t>(shape.batch) * count * dim;
  for (size_t k = FirstIndex(); k < total; k += GridStride()) {
    const int d = static_cast<int>(k % dim);
    const int v = static_cast<int>(k / dim % count);
    const size_t i = k / dim / count;
    if (v == 0) {
      vectors[k] = bottom[i * dim + d];
      continue;
    }
    const size_t slot = i * shape.fields + (v - 1);
    const uint32_t begin = offsets[slot];
    const uint32_t end = offsets[slot + 1];
    float sum = 0.0f;
    for (uint32_t r = begin; r < end; ++r) {
      sum += embeddings[static_cast<size_t>(rows[r]) * dim + d];
    }
    if (shape.mean && end - begin > 1) sum *= 1.0f / (end - begin);
    vectors[k] = sum;
  }
}

// One thread per (example, output column).
__global__ void DotInteractionKernel(const float* vectors,
                                     const int* pair_first,
                                     const int* pair_second, int batch,
                                     int count, int dim, int pairs, float* z) {
  const size_t width = static_cast<size_t>(dim) + pairs;
  const size_t total = batch * width;
  for (size_t k = FirstIndex(); k < total; k += GridStride()) {
    const size_t j = k % width;
    const float* v = vectors + k / width * count * dim;
    if (j < static_cast<size_t>(dim)) {
      z[k] = v[j];
      continue;
    }
    const size_t p = j - dim;
    const float* va = v + static_cast<size_t>(pair_first[p]) * dim;
    const float* vb = v + static_cast<size_t>(pair_second[p]) * dim;
    float sum = 0.0f;
    for (int d = 0; d < dim; ++d) sum += va[d] * vb[d];
    z[k] = sum;
  }
}

// One thread per (example, vector a, d): the sum over the pairs (a, b) of
// d<v_a, v_b> * v_b[d], plus dz[d] for the bottom vector (a = 0).
__global__ void DotInteractionBackwardKernel(const float* vectors,
                                             const float* dz, int batch,
                                             int count, int dim, float* dv) {
  const size_t width = static_cast<size_t>(dim) + count * (count - 1) / 2;
  const size_t total = static_cast<size_t>(batch) * count * dim;
  for (size_t k = FirstIndex(); k < total; k += GridStride()) {
    const int d = static_cast<int>(k % dim);
    const int a = static_cast<int>(k / dim % count);
    const size_t i = k / dim / count;
    const float* v = vectors + i * count * dim;
    const float* dzi = dz + i * width;
    float sum = a == 0 ? dzi[d] : 0.0f;
    for (int b = 0; b < count; ++b) {
      if (b == a) continue;
      const int lo = min(a, b);
      const int hi = max(a, b);
      // The index of pair (lo, hi) in the order of the forward pass.
      const int p = lo * count - lo * (lo + 1) / 2 + (hi - lo - 1);
      sum += dzi[dim + p] * v[static_cast<size_t>(b) * dim + d];
    }
    dv[k] = sum;
  }
}

__global__ void LogisticLossKernel(const float* logits, const float* labels,
                                   int batch, float* probabilities,
                                   float* losses, float* logit_grads) {
  for (size_t i = FirstIndex(); i < static_cast<size_t>(batch);
       i += GridStride()) {
    const float x = logits[i];
    const float y = labels[i];
    // Stable for large |x|, as in the CPU model.
    losses[i] = Relu(x) - x * y + log1pf(expf(-fabsf(x)));
    const float p = 1.0f / (1.0f + expf(-x));
    probabilities[i] = p;
    logit_grads[i] = p - y;
  }
}

__global__ void SigmoidKernel(const float* logits, int batch,
                              float* probabilities) {
  for (size_t i = FirstIndex(); i < static_cast<size_t>(batch);
       i += GridStride()) {
    probabilities[i] = 1.0f / (1.0f + expf(-logits[i]));
  }
}

// One thread per (example, field, d), adding into every row the field pools.
__global__ void ScatterRowGradientsKernel(PoolingShape shape,
                                          const float* vector_grads,
                                          const uint32_t* offsets,
                                          const uint32_t* rows,
                                          float* row_grads) {
  const int dim = shape.dim;
  const size_t total = static_cast<size_t>(shape.batch) * shape.fields * dim;
  for (size_t k = FirstIndex(); k < total; k += GridStride()) {
    const int d = static_cast<int>(k % dim);
    const size_t slot = k / dim;
    const uint32_t begin = offsets[slot];
    const uint32_t end = offsets[slot + 1];
    if (begin == end) continue;
    const size_t i = slot / shape.fields;
    const size_t f = slot % shape.fields;
    const float g = vector_grads[(i * (shape.fields + 1) + f + 1) * dim + d];
    const float scale =
        shape.mean && end - begin > 1 ? 1.0f / (end - begin) : 1.0f;
    for (uint32_t r = begin; r < end; ++r) {
      atomicAdd(&row_grads[static_cast<size_t>(rows[r]) * dim + d], scale * g);
    }
  }
}

}  // namespace

cudaError_t LaunchAddBiasRelu(float* y, const float* bias, int rows, int cols,
                              bool relu, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(rows) * cols;
  if (count == 0) return cudaSuccess;
  AddBiasReluKernel<<<Blocks(count), kThreads, 0, stream>>>(y, bias, count,
                                                            cols, relu);
  return cudaGetLastError();
}

cudaError_t LaunchReluMask(const float* y, float* grad, size_t count,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ReluMaskKernel<<<Blocks(count), kThreads, 0, stream>>>(y, grad, count);
  return cudaGetLastError();
}

cudaError_t LaunchFill(float* x, size_t count, float value,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FillKernel<<<Blocks(count), kThreads, 0, stream>>>(x, count, value);
  return cudaGetLastError();
}

cudaError_t LaunchPoolEmbeddings(const PoolingShape& shape, const float* bottom,
                                 const float* embeddings,
                                 const uint32_t* offsets, const uint32_t* rows,
                                 float* vectors, cudaStream_t stream) {
  const size_t total =
      static_cast<size_t>(shape.batch) * (shape.fields + 1) * shape.dim;
  if (total == 0) return cudaSuccess;
  PoolEmbeddingsKernel<<<Blocks(total), kThreads, 0, stream>>>(
      shape, bottom, embeddings, offsets, rows, vectors);
  return cudaGetLastError();
}

cudaError_t LaunchDotInteraction(const float* vectors, const int* pair_first,
                                 const int* pair_second, int batch, int count,
                                 int dim, int pairs, float* z,
                                 cudaStream_t stream) {
  const size_t total = static_cast<size_t>(batch) * (dim + pairs);
  if (total == 0) return cudaSuccess;
  DotInteractionKernel<<<Blocks(total), kThreads, 0, stream>>>(
      vectors, pair_first, pair_second, batch, count, dim, pairs, z);
  return cudaGetLastError();
}

cudaError_t LaunchDotInteractionBackward(const float* vectors, const float* dz,
                                         int batch, int count, int dim,
                                         float* dv, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(batch) * count * dim;
  if (total == 0) return cudaSuccess;
  DotInteractionBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(
      vectors, dz, batch, count, dim, dv);
  return cudaGetLastError();
}

cudaError_t LaunchLogisticLoss(const float* logits, const float* labels,
                               int batch, float* probabilities, float* losses,
                               float* logit_grads, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  LogisticLossKernel<<<Blocks(batch), kThreads, 0, stream>>>(
      logits, labels, batch, probabilities, losses, logit_grads);
  return cudaGetLastError();
}

cudaError_t LaunchSigmoid(const float* logits, int batch, float* probabilities,
                          cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  SigmoidKernel<<<Blocks(batch), kThreads, 0, stream>>>(logits, batch,
                                                        probabilities);
  return cudaGetLastError();
}

cudaError_t LaunchScatterRowGradients(const PoolingShape& shape,
                                      const float* vector_grads,
                                      const uint32_t* offsets,
                                      const uint32_t* rows, float* row_grads,
                                      cudaStream_t stream) {
  const size_t total =
      static_cast<size_t>(shape.batch) * shape.fields * shape.dim;
  if (total == 0) return cudaSuccess;
  ScatterRowGradientsKernel<<<Blocks(total), kThreads, 0, stream>>>(
      shape, vector_grads, offsets, rows, row_grads);
  return cudaGetLastError();
}

}  // namespace model_internal
}  // namespace strata
