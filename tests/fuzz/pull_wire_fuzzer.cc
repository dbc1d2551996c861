// libFuzzer target: PullResponseReader (common/pull_wire.h) on any bytes, cut
// into gRPC slices at places the input chooses. It must return a status for
// every input (never read past the buffer, never loop), and what it reads
// must stay within what it announced.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/pull_wire.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks how the rest is split into slices, as a message
  // arrives in pieces off the network.
  const size_t piece = 1 + data[0] % 64;
  ++data;
  --size;
  std::vector<grpc::Slice> slices;
  for (size_t offset = 0; offset < size; offset += piece) {
    const size_t n = size - offset < piece ? size - offset : piece;
    slices.emplace_back(data + offset, n);
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  strata::PullResponseReader reader(buffer);
  std::vector<uint8_t> values;
  for (int batches = 0; batches < 1 << 16; ++batches) {
    size_t value_bytes = 0;
    bool fp16 = false;
    if (!reader.NextBatch(&value_bytes, &fp16).ok()) break;
    // A batch never announces more value bytes than the message holds.
    if (value_bytes > size) __builtin_trap();
    values.resize(value_bytes);
    if (!reader.ReadValues(values.data(), value_bytes).ok()) break;
  }
  return 0;
}
