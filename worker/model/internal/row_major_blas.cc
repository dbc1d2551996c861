// A row-major r x c matrix with leading dimension c is, to cuBLAS, the
// column-major c x r matrix that is its transpose. So C = op(A) op(B) is
// computed as C^T = op(B)^T op(A)^T: the operands swap places, keep their
// transpose flags, and m and n swap.

#include "worker/model/internal/row_major_blas.h"

#include "worker/model/internal/cuda_status.h"

namespace strata {
namespace model_internal {
namespace {

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

}  // namespace

absl::Status RowMajorMatMul(cublasHandle_t cublas, int m, int n, int k,
                            const float* a, const float* b, float* c) {
  // C^T[n x m] = B^T[n x k] * A^T[k x m].
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n,
                                            m, k, &kOne, b, n, a, k, &kZero, c,
                                            n));
  return absl::OkStatus();
}

absl::Status RowMajorMatMulTransA(cublasHandle_t cublas, int m, int n, int k,
                                  const float* a, const float* b, float* c) {
  // C^T[n x k] = B^T[n x m] * A[m x k]; A is stored as A^T (k x m, ld k).
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, n,
                                            k, m, &kOne, b, n, a, k, &kZero, c,
                                            n));
  return absl::OkStatus();
}

absl::Status RowMajorMatMulTransB(cublasHandle_t cublas, int m, int n, int k,
                                  const float* a, const float* b, float* c) {
  // C^T[k x m] = B[k x n] * A^T[n x m]; B is stored as B^T (n x k, ld n).
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, k,
                                            m, n, &kOne, b, n, a, n, &kZero, c,
                                            k));
  return absl::OkStatus();
}

absl::Status RowMajorColumnSums(cublasHandle_t cublas, int rows, int cols,
                                const float* x, const float* ones,
                                float* sums) {
  // Column-major, x is x^T (cols x rows, ld cols): sums = x^T * ones.
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSgemv(cublas, CUBLAS_OP_N, cols, rows,
                                            &kOne, x, cols, ones, 1, &kZero,
                                            sums, 1));
  return absl::OkStatus();
}

}  // namespace model_internal
}  // namespace strata
