#ifndef STRATA_COMMON_CUDA_STATUS_H_
#define STRATA_COMMON_CUDA_STATUS_H_

// CUDA runtime errors as absl::Status, for every CUDA user (the dense model,
// the NCCL collective). Built only with the CUDA path (STRATA_WITH_CUDA).

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace strata {

// OK for cudaSuccess; otherwise "<call>: <error name>: <description>" as
// RESOURCE_EXHAUSTED (out of memory), FAILED_PRECONDITION (no usable device,
// driver or kernel image) or INTERNAL.
absl::Status CudaStatus(cudaError_t error, absl::string_view call);

}  // namespace strata

#define STRATA_CUDA_RETURN_IF_ERROR(call) \
  STRATA_RETURN_IF_ERROR(::strata::CudaStatus((call), #call))

#endif  // STRATA_COMMON_CUDA_STATUS_H_
