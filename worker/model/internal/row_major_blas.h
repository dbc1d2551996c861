#ifndef STRATA_WORKER_MODEL_INTERNAL_ROW_MAJOR_BLAS_H_
#define STRATA_WORKER_MODEL_INTERNAL_ROW_MAJOR_BLAS_H_

#include <cublas_v2.h>

#include "absl/status/status.h"

namespace strata {
namespace model_internal {

// cuBLAS products of row-major device matrices (cuBLAS itself is
// column-major), queued on the handle's stream. The same three shapes as the
// CPU model's cblas helpers. INTERNAL (from CublasStatus) when cuBLAS
// refuses the call.

// C[m x n] = A[m x k] * B[k x n].
absl::Status RowMajorMatMul(cublasHandle_t cublas, int m, int n, int k,
                            const float* a, const float* b, float* c);

// C[k x n] = A[m x k]^T * B[m x n].
absl::Status RowMajorMatMulTransA(cublasHandle_t cublas, int m, int n, int k,
                                  const float* a, const float* b, float* c);

// C[m x k] = A[m x n] * B[k x n]^T.
absl::Status RowMajorMatMulTransB(cublasHandle_t cublas, int m, int n, int k,
                                  const float* a, const float* b, float* c);

// sums[j] = sum over i of x[i][j] for x: rows x cols; `ones` holds at least
// `rows` ones.
absl::Status RowMajorColumnSums(cublasHandle_t cublas, int rows, int cols,
                                const float* x, const float* ones, float* sums);

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_ROW_MAJOR_BLAS_H_
