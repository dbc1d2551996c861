#ifndef STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_
#define STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace strata {
namespace model_internal {

// cuBLAS errors as Status, like CudaStatus (common/cuda_status.h) for the
// runtime: RESOURCE_EXHAUSTED for CUBLAS_STATUS_ALLOC_FAILED,
// FAILED_PRECONDITION for CUBLAS_STATUS_NOT_INITIALIZED, else INTERNAL.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call);

}  // namespace model_internal
}  // namespace strata

// Returns the Status of a cuBLAS call from the current function when it
// failed; the message quotes the call. STRATA_CUDA_RETURN_IF_ERROR (from
// common/cuda_status.h) does the same for runtime calls and kernel launchers.
#define STRATA_CUBLAS_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::model_internal::CublasStatus((call), #call))

#endif  // STRATA_WORKER_MODEL_INTERNAL_CUDA_STATUS_H_
