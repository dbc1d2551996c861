#include "common/pull_wire.h"

#include <cstring>

#include "common/wire_varint.h"
#include "grpc/slice.h"

namespace strata {
namespace {

// Field tags of strata.v1.PullResponse / TableBatch, wire type 2 (length
// delimited): (field number << 3) | 2.
constexpr uint8_t kBatchesTag = (1 << 3) | 2;
constexpr uint8_t kValuesTag = (3 << 3) | 2;
constexpr uint8_t kValuesFp16Tag = (4 << 3) | 2;

constexpr uint8_t kPaddingTag = (15 << 3) | 2;

// Lengths are written as fixed-size varints, so that every offset is known
// before the padding is chosen.
constexpr size_t kLengthBytes = kFixedVarintBytes;
// batches tag + length, padding tag + length, values tag + length.
constexpr size_t kHeaderBytes = 1 + kLengthBytes + 2 + 1 + kLengthBytes;
constexpr size_t kAlignment = 16;

}  // namespace

size_t PullResponseWriter::MostBytes(absl::Span<const size_t> value_bytes) {
  size_t most = 0;
  for (size_t bytes : value_bytes) most += kHeaderBytes + kAlignment + bytes;
  return most;
}

PullResponseWriter::PullResponseWriter(absl::Span<const size_t> value_bytes,
                                       bool fp16) {
  // Always a heap buffer: grpc_slice_malloc keeps small slices inline in
  // the grpc_slice value itself, where the pointers kept below would not
  // survive the copy into slice_.
  grpc_slice raw = grpc_slice_malloc_large(MostBytes(value_bytes));
  Lay(value_bytes, fp16, GRPC_SLICE_START_PTR(raw));
  slice_ = grpc::Slice(raw, grpc::Slice::STEAL_REF);
}

PullResponseWriter::PullResponseWriter(absl::Span<const size_t> value_bytes,
                                       bool fp16, uint8_t* memory) {
  Lay(value_bytes, fp16, memory);
}

void PullResponseWriter::Lay(absl::Span<const size_t> value_bytes, bool fp16,
                             uint8_t* start) {
  uint8_t* out = start;
  for (size_t bytes : value_bytes) {
    const uintptr_t values_at = reinterpret_cast<uintptr_t>(out) + kHeaderBytes;
    const size_t padding = (kAlignment - values_at % kAlignment) % kAlignment;
    const size_t batch = 2 + padding + 1 + kLengthBytes + bytes;
    *out++ = kBatchesTag;
    out = WriteFixedVarint(batch, out);
    *out++ = kPaddingTag;
    *out++ = static_cast<uint8_t>(padding);
    std::memset(out, 0, padding);
    out += padding;
    *out++ = fp16 ? kValuesFp16Tag : kValuesTag;
    out = WriteFixedVarint(bytes, out);
    values_.push_back(out);
    out += bytes;
  }
  length_ = static_cast<size_t>(out - start);
}

grpc::ByteBuffer PullResponseWriter::Finish() {
  // Cut only now: a short sub-slice is a copy of the bytes (inlined), and
  // the values are written after construction.
  grpc::Slice used = slice_.sub(0, length_);
  return grpc::ByteBuffer(&used, 1);
}

PullResponseReader::PullResponseReader(const grpc::ByteBuffer& buffer) {
  grpc::Status status = buffer.Dump(&slices_);
  if (!status.ok()) {
    dump_status_ = absl::DataLossError("cannot read the pull response");
  }
  for (const grpc::Slice& slice : slices_) total_ += slice.size();
}

size_t PullResponseReader::Remaining() const { return total_ - position_; }

bool PullResponseReader::Read(void* destination, size_t n) {
  if (n > Remaining()) return false;
  auto* out = static_cast<uint8_t*>(destination);
  while (n > 0) {
    const grpc::Slice& slice = slices_[slice_];
    const size_t available = slice.size() - offset_;
    const size_t chunk = n < available ? n : available;
    std::memcpy(out, slice.begin() + offset_, chunk);
    out += chunk;
    n -= chunk;
    offset_ += chunk;
    position_ += chunk;
    if (offset_ == slice.size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  return true;
}

bool PullResponseReader::Skip(size_t n) {
  if (n > Remaining()) return false;
  while (n > 0) {
    const size_t available = slices_[slice_].size() - offset_;
    const size_t chunk = n < available ? n : available;
    n -= chunk;
    offset_ += chunk;
    position_ += chunk;
    if (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  return true;
}

bool PullResponseReader::ReadByte(uint8_t* byte) { return Read(byte, 1); }

bool PullResponseReader::ReadVarint(uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t byte;
    if (!ReadByte(&byte)) return false;
    *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

absl::Status PullResponseReader::NextBatch(size_t* value_bytes, bool* fp16) {
  if (!dump_status_.ok()) return dump_status_;
  const absl::Status malformed =
      absl::DataLossError("malformed pull response from the shard");
  // Skip what is left of the previous batch.
  if (position_ < batch_end_ && !Skip(batch_end_ - position_)) return malformed;
  while (true) {
    if (Remaining() == 0) return absl::NotFoundError("no more batches");
    uint64_t tag, length;
    if (!ReadVarint(&tag)) return malformed;
    if (tag != kBatchesTag) {  // An unknown field, of any wire type: skip it.
      if ((tag >> 3) == (kBatchesTag >> 3) || !SkipField(tag)) {
        return malformed;
      }
      continue;
    }
    if (!ReadVarint(&length) || length > Remaining()) return malformed;
    batch_end_ = position_ + length;
    break;
  }
  *value_bytes = 0;
  *fp16 = false;
  // Find the values field inside the batch; skip others (table, keys).
  while (position_ < batch_end_) {
    uint64_t tag, length;
    if (!ReadVarint(&tag) || position_ > batch_end_) return malformed;
    if (tag == kValuesTag || tag == kValuesFp16Tag) {
      // The length's own bytes may run past the batch: check both.
      if (!ReadVarint(&length) || position_ > batch_end_ ||
          length > batch_end_ - position_) {
        return malformed;
      }
      *value_bytes = length;
      *fp16 = tag == kValuesFp16Tag;
      values_left_ = length;
      return absl::OkStatus();
    }
    // The values in another wire type (unpacked) are not what shards
    // write: malformed rather than skipped, so that no value is lost.
    if ((tag >> 3) == (kValuesTag >> 3) ||
        (tag >> 3) == (kValuesFp16Tag >> 3) || !SkipField(tag) ||
        position_ > batch_end_) {
      return malformed;
    }
  }
  values_left_ = 0;
  return absl::OkStatus();
}

bool PullResponseReader::SkipField(uint64_t tag) {
  uint64_t value;
  switch (tag & 7) {
    case 0:  // varint
      return ReadVarint(&value);
    case 1:  // 64-bit
      return Skip(8);
    case 2:  // length-delimited
      return ReadVarint(&value) && value <= Remaining() &&
             Skip(static_cast<size_t>(value));
    case 5:  // 32-bit
      return Skip(4);
    default:  // groups (deprecated) and invalid types
      return false;
  }
}

absl::Status PullResponseReader::ReadValues(void* destination, size_t n) {
  if (n > values_left_ || !Read(destination, n)) {
    return absl::DataLossError("pull response holds fewer values than asked");
  }
  values_left_ -= n;
  return absl::OkStatus();
}

}  // namespace strata
