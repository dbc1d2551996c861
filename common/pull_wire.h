#ifndef STRATA_COMMON_PULL_WIRE_H_
#define STRATA_COMMON_PULL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace strata {

// Trailing metadata of a pull answered over gRPC although it offered shared
// memory (v1::SharedAnswer) the shard cannot use: why, in printable ASCII.
inline constexpr char kSharedAnswerRefusalMetadata[] =
    "strata-shared-answer-refusal";
// The contract of a v1::SharedAnswer between client and shard: the memory
// starts with a token of this many random bytes, and a region's offset is a
// multiple of the alignment.
inline constexpr size_t kSharedAnswerTokenBytes = 16;
inline constexpr size_t kSharedAnswerAlignment = 64;

// A region starts with its claim word, in a cache line of its own; the
// answer follows that line. The word says who may write the region: the
// client sets it to Offered(g) before it sends the pull, with
// SharedAnswer.claim = Offered(g). The shard moves it from Offered(g) to
// Writing(g) before it writes, and to Written(g) once it no longer writes.
// A client whose pull failed (its deadline passed, say) moves it from
// Offered(g) to Abandoned(g): from then on the shard answers that pull over
// gRPC. Otherwise (Writing) the shard may still be writing, and the region
// waits for Written before another pull may use it.
//
// The line's second word is the pid of the shard process that writes the
// region (0: not known yet). The client zeroes it when it offers the
// region, the shard sets it once the word says Writing, and a client may
// take back a region whose writer no longer exists (a shard killed in the
// middle of a write).
inline constexpr size_t kSharedAnswerClaimBytes = 64;
inline constexpr size_t kSharedAnswerWriterOffset = 8;

enum class SharedAnswerClaim : uint64_t {
  kOffered = 0,
  kWriting = 1,
  kWritten = 2,
  kAbandoned = 3,
};

// The claim word of generation `generation` (below 2^62) in `state`.
constexpr uint64_t SharedAnswerClaimWord(uint64_t generation,
                                         SharedAnswerClaim state) {
  return generation << 2 | static_cast<uint64_t>(state);
}
constexpr SharedAnswerClaim SharedAnswerClaimState(uint64_t word) {
  return static_cast<SharedAnswerClaim>(word & 3);
}
// `word`'s generation in `state`.
constexpr uint64_t SharedAnswerClaimAs(uint64_t word, SharedAnswerClaim state) {
  return (word & ~uint64_t{3}) | static_cast<uint64_t>(state);
}

// The claim word at the start of `region` (8-byte aligned, in memory shared
// with another process), read and written atomically.
inline uint64_t LoadSharedAnswerClaim(const uint8_t* region) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(region),
                         __ATOMIC_ACQUIRE);
}
inline void StoreSharedAnswerClaim(uint8_t* region, uint64_t word) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(region), word, __ATOMIC_RELEASE);
}
inline uint64_t LoadSharedAnswerWriter(const uint8_t* region) {
  return __atomic_load_n(
      reinterpret_cast<const uint64_t*>(region + kSharedAnswerWriterOffset),
      __ATOMIC_ACQUIRE);
}
inline void StoreSharedAnswerWriter(uint8_t* region, uint64_t pid) {
  __atomic_store_n(
      reinterpret_cast<uint64_t*>(region + kSharedAnswerWriterOffset), pid,
      __ATOMIC_RELEASE);
}
// Sets the word to `desired` when it holds `expected`; false (and
// *expected set to what it holds) otherwise.
inline bool ExchangeSharedAnswerClaim(uint8_t* region, uint64_t* expected,
                                      uint64_t desired) {
  return __atomic_compare_exchange_n(reinterpret_cast<uint64_t*>(region),
                                     expected, desired, /*weak=*/false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

// The values of a PullResponse are most of the bytes a shard sends. These
// helpers write and read that message's wire format (it stays a valid
// strata.v1.PullResponse for every other client) straight between the rows
// and gRPC's buffers, without building or parsing a protobuf message:
// one copy on each side instead of three.

// Builds a PullResponse whose batch i holds `value_bytes[i]` bytes of values
// (packed float32 in field `values`, or fp16 in `values_fp16`). `fill(i,
// destination)` must write exactly value_bytes[i] bytes.
class PullResponseWriter {
 public:
  PullResponseWriter(absl::Span<const size_t> value_bytes, bool fp16);
  // Writes the message into `memory` instead, which must hold
  // MostBytes(value_bytes); Finish() is then not called, and length() bytes
  // from `memory` are the message.
  PullResponseWriter(absl::Span<const size_t> value_bytes, bool fp16,
                     uint8_t* memory);

  // The most bytes a message with these values takes (with its padding).
  static size_t MostBytes(absl::Span<const size_t> value_bytes);

  // The buffer's memory is uninitialized until filled.
  uint8_t* batch_values(size_t batch) { return values_[batch]; }
  size_t length() const { return length_; }
  grpc::ByteBuffer Finish();

 private:
  void Lay(absl::Span<const size_t> value_bytes, bool fp16, uint8_t* start);

  grpc::Slice slice_;
  size_t length_ = 0;
  std::vector<uint8_t*> values_;
};

// Reads the batches of a serialized PullResponse from gRPC's slices.
class PullResponseReader {
 public:
  // REQUIRES: `buffer` outlives the reader.
  explicit PullResponseReader(const grpc::ByteBuffer& buffer);

  // Moves to the next batch and returns the byte size of its values (float32
  // or fp16, whichever is present). NOT_FOUND after the last batch,
  // DATA_LOSS for a malformed message.
  absl::Status NextBatch(size_t* value_bytes, bool* fp16);
  // Copies the next `n` value bytes of the current batch to `destination`.
  absl::Status ReadValues(void* destination, size_t n);

 private:
  bool ReadByte(uint8_t* byte);
  bool ReadVarint(uint64_t* value);
  bool Skip(size_t n);
  // Skips the value of a field with `tag` (any wire type but groups).
  bool SkipField(uint64_t tag);
  bool Read(void* destination, size_t n);
  size_t Remaining() const;

  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  size_t batch_end_ = 0;    // Absolute position where the batch ends.
  size_t values_left_ = 0;  // Value bytes of the batch not yet read.
  size_t position_ = 0;     // Absolute position in the message.
  size_t total_ = 0;
  absl::Status dump_status_;
};

}  // namespace strata

#endif  // STRATA_COMMON_PULL_WIRE_H_
