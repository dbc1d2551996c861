#ifndef STRATA_COMMON_GRPC_STATUS_H_
#define STRATA_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace strata {

// The numeric codes of absl::StatusCode and grpc::StatusCode are both
// google.rpc.Code, so the conversions keep the code and the message.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace strata

#endif  // STRATA_COMMON_GRPC_STATUS_H_
