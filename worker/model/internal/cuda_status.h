#ifndef STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_
#define STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace strata {
namespace model_internal {

// OK for cudaSuccess; otherwise a Status naming `call` and the error:
// RESOURCE_EXHAUSTED when device memory ran out, FAILED_PRECONDITION when no
// usable device or driver is there (or the kernels were not built for it),
// INTERNAL for the rest (after which the CUDA context is usually unusable).
absl::Status CudaStatus(cudaError_t error, absl::string_view call);

// The same for cuBLAS: RESOURCE_EXHAUSTED for CUBLAS_STATUS_ALLOC_FAILED,
// FAILED_PRECONDITION for CUBLAS_STATUS_NOT_INITIALIZED, else INTERNAL.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call);

}  // namespace model_internal
}  // namespace strata

// Returns the Status of a CUDA runtime call (or a kernel launcher, which
// returns cudaError_t) from the current function when it failed; the
// message quotes the call.
#define STRATA_CUDA_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::model_internal::CudaStatus((call), #call))

#define STRATA_CUBLAS_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::model_internal::CublasStatus((call), #call))

#endif  // STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_
