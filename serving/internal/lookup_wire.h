#ifndef STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_
#define STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace strata {
namespace serving_internal {

// Writes a strata.v1.LookupResponse's wire bytes into one buffer that gRPC
// sends as it is: the store fills the values in place, so an answer costs
// no zero-fill, no protobuf message and no serialization copy. The values
// come first, 16-byte aligned behind the `padding` field, then `dim` and
// `num_missing`.
//
// Example:
//   LookupResponseWriter writer(keys.size() * dim);
//   size_t missing = store.Lookup(table, keys, writer.values()).value();
//   grpc::ByteBuffer answer = writer.Finish(dim, missing);
class LookupResponseWriter {
 public:
  explicit LookupResponseWriter(size_t num_values);

  // Uninitialized until written.
  absl::Span<float> values() { return values_; }
  grpc::ByteBuffer Finish(uint32_t dim, uint32_t num_missing);

 private:
  grpc::Slice slice_;
  uint8_t* end_ = nullptr;  // Where `dim` goes, after the values.
  absl::Span<float> values_;
};

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_
