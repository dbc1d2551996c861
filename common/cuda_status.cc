#include "common/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(call, ": ", cudaGetErrorName(error),
                                           ": ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace strata
