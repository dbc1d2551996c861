#include "worker/model/internal/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace strata {
namespace model_internal {

absl::Status CublasStatus(cublasStatus_t status, absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, ": ", cublasGetStatusName(status), ": ",
                   cublasGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace model_internal
}  // namespace strata
