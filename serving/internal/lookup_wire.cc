#include "serving/internal/lookup_wire.h"

#include <cstring>

#include "common/fp16.h"
#include "common/wire_varint.h"
#include "grpc/slice.h"

namespace strata {
namespace serving_internal {
namespace {

// Field tags of strata.v1.LookupResponse: (field number << 3) | wire type.
constexpr uint8_t kDimTag = (1 << 3) | 0;
constexpr uint8_t kValuesTag = (2 << 3) | 2;
constexpr uint8_t kNumMissingTag = (3 << 3) | 0;
constexpr uint8_t kHalvesTag = (4 << 3) | 2;
constexpr uint8_t kPaddingTag = (15 << 3) | 2;

// The values' length is a fixed-size varint, so that the padding can be
// chosen before it is known.
constexpr size_t kLengthBytes = kFixedVarintBytes;
constexpr size_t kAlignment = 16;
// Padding tag and length, values tag and length.
constexpr size_t kHeaderBytes = 2 + 1 + kLengthBytes;

}  // namespace

LookupResponseWriter::LookupResponseWriter(size_t num_values, bool fp16) {
  const size_t value_bytes =
      num_values * (fp16 ? sizeof(uint16_t) : sizeof(float));
  // Always a heap buffer: grpc_slice_malloc may keep a small slice inline
  // in the grpc_slice value, where the pointers kept here would not survive
  // the copy into slice_.
  grpc_slice raw = grpc_slice_malloc_large(
      kHeaderBytes + kAlignment + value_bytes + 2 * (1 + kMaxVarint32Bytes));
  uint8_t* out = GRPC_SLICE_START_PTR(raw);
  const uintptr_t values_at = reinterpret_cast<uintptr_t>(out) + kHeaderBytes;
  const size_t padding = (kAlignment - values_at % kAlignment) % kAlignment;
  *out++ = kPaddingTag;
  *out++ = static_cast<uint8_t>(padding);
  std::memset(out, 0, padding);
  out += padding;
  *out++ = fp16 ? kHalvesTag : kValuesTag;
  out = WriteFixedVarint(value_bytes, out);
  if (fp16) {
    scratch_.reset(new float[num_values]);  // Uninitialized, as the slice.
    values_ = absl::MakeSpan(scratch_.get(), num_values);
    halves_ = reinterpret_cast<uint16_t*>(out);
  } else {
    values_ = absl::MakeSpan(reinterpret_cast<float*>(out), num_values);
  }
  end_ = out + value_bytes;
  slice_ = grpc::Slice(raw, grpc::Slice::STEAL_REF);
}

grpc::ByteBuffer LookupResponseWriter::Finish(uint32_t dim,
                                              uint32_t num_missing) {
  if (halves_ != nullptr) {
    FloatsToHalves(values_.data(), values_.size(), halves_);
  }
  uint8_t* out = end_;
  *out++ = kDimTag;
  out = WriteVarint(dim, out);
  *out++ = kNumMissingTag;
  out = WriteVarint(num_missing, out);
  grpc::Slice used = slice_.sub(0, static_cast<size_t>(out - slice_.begin()));
  return grpc::ByteBuffer(&used, 1);
}

}  // namespace serving_internal
}  // namespace strata
