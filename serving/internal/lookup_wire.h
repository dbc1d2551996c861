#ifndef STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_
#define STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace strata {
namespace serving_internal {

// Writes a strata.v1.LookupResponse's wire bytes into one buffer that gRPC
// sends as it is: the store fills the values in place, so an answer costs
// no zero-fill, no protobuf message and no serialization copy. The values
// come first, 16-byte aligned behind the `padding` field, then `dim` and
// `num_missing`. With `fp16` the store fills a scratch array of floats
// instead, and Finish writes them as half floats into `values_fp16`.
//
// Example:
//   LookupResponseWriter writer(keys.size() * dim, /*fp16=*/false);
//   size_t missing = store.Lookup(table, keys, writer.values()).value();
//   grpc::ByteBuffer answer = writer.Finish(dim, missing);
class LookupResponseWriter {
 public:
  LookupResponseWriter(size_t num_values, bool fp16);

  // Uninitialized until written.
  absl::Span<float> values() { return values_; }
  grpc::ByteBuffer Finish(uint32_t dim, uint32_t num_missing);

 private:
  grpc::Slice slice_;
  uint8_t* end_ = nullptr;  // Where `dim` goes, after the values.
  absl::Span<float> values_;
  // With fp16: what values_ points at, and where its halves go.
  std::unique_ptr<float[]> scratch_;
  uint16_t* halves_ = nullptr;
};

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_LOOKUP_WIRE_H_
