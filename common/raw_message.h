#ifndef STRATA_COMMON_RAW_MESSAGE_H_
#define STRATA_COMMON_RAW_MESSAGE_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace strata {

// For gRPC methods served raw (serialized bytes in and out): gRPC's own
// parsing answers a request that does not parse with UNIMPLEMENTED and no
// message; these make it INVALID_ARGUMENT naming the method and the message.

// Parses `bytes` as a `Request` (a protobuf message type).
template <typename Request>
absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          absl::string_view method, Request* request) {
  grpc::ByteBuffer copy(bytes);  // Shares the slices; no bytes copied.
  if (!grpc::SerializationTraits<Request>::Deserialize(&copy, request).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        method, " request is not a ", Request::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

template <typename Response>
void SerializeResponse(const Response& response, grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  grpc::SerializationTraits<Response>::Serialize(response, bytes, &own_buffer)
      .IgnoreError();
}

}  // namespace strata

#endif  // STRATA_COMMON_RAW_MESSAGE_H_
