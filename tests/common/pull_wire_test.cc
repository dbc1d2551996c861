#include "common/pull_wire.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

grpc::ByteBuffer BufferOf(const std::string& bytes, size_t piece = 7) {
  std::vector<grpc::Slice> slices;
  for (size_t offset = 0; offset < bytes.size(); offset += piece) {
    slices.emplace_back(bytes.data() + offset,
                        std::min(piece, bytes.size() - offset));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Reads every batch's float values; the status of the first failure.
absl::Status ReadAll(const std::string& bytes,
                     std::vector<std::vector<float>>* batches) {
  grpc::ByteBuffer buffer = BufferOf(bytes);
  PullResponseReader reader(buffer);
  while (true) {
    size_t value_bytes = 0;
    bool fp16 = false;
    absl::Status next = reader.NextBatch(&value_bytes, &fp16);
    if (absl::IsNotFound(next)) return absl::OkStatus();
    if (!next.ok()) return next;
    std::vector<float> values(value_bytes / sizeof(float));
    absl::Status read = reader.ReadValues(values.data(), value_bytes);
    if (!read.ok()) return read;
    batches->push_back(values);
  }
}

std::string Serialized(const v1::PullResponse& response) {
  std::string bytes;
  response.SerializeToString(&bytes);
  return bytes;
}

v1::PullResponse TwoBatches() {
  v1::PullResponse response;
  v1::TableBatch* first = response.add_batches();
  first->add_values(1.5f);
  first->add_values(-2.0f);
  response.add_batches()->add_values(3.0f);
  return response;
}

TEST(PullWireTest, ReadsWhatProtobufWrote) {
  std::vector<std::vector<float>> batches;
  ASSERT_THAT(ReadAll(Serialized(TwoBatches()), &batches), IsOk());
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(batches[1], (std::vector<float>{3.0f}));
}

TEST(PullWireTest, ZeroBatchesIsAnEmptyAnswer) {
  std::vector<std::vector<float>> batches;
  EXPECT_THAT(ReadAll("", &batches), IsOk());
  EXPECT_TRUE(batches.empty());
}

TEST(PullWireTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = Serialized(TwoBatches());
  for (size_t size = 1; size < bytes.size(); ++size) {
    std::vector<std::vector<float>> batches;
    absl::Status status = ReadAll(bytes.substr(0, size), &batches);
    // A cut between batches is a shorter valid message; anywhere else it
    // is malformed.
    if (status.ok()) {
      EXPECT_EQ(batches.size(), 1u) << size;
    } else {
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss)) << size;
    }
  }
}

TEST(PullWireTest, UnknownFieldsOfEveryWireTypeAreSkipped) {
  v1::PullResponse response = TwoBatches();
  std::string bytes;
  // Before the batches: field 2 as varint, 64-bit, length-delimited and
  // 32-bit (wire types 0, 1, 2, 5).
  bytes += std::string("\x10\x96\x01", 3);
  bytes += std::string("\x11", 1) + std::string(8, '\x07');
  bytes += std::string("\x12\x03xyz", 5);
  bytes += std::string("\x15", 1) + std::string(4, '\x09');
  bytes += Serialized(response);
  std::vector<std::vector<float>> batches;
  ASSERT_THAT(ReadAll(bytes, &batches), IsOk());
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1], (std::vector<float>{3.0f}));
}

TEST(PullWireTest, ABatchLongerThanTheMessageIsDataLoss) {
  // Field 1, length 100, but only 2 bytes follow.
  const std::string bytes("\x0a\x64\x1a\x00", 4);
  std::vector<std::vector<float>> batches;
  EXPECT_THAT(ReadAll(bytes, &batches), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PullWireTest, AValuesLengthThatWouldWrapAroundIsDataLoss) {
  // Found by the fuzzer: a batch whose values length is 2^64 - 1.
  const std::string bytes =
      std::string("\x0a\x0b\x1a", 3) + std::string(9, '\xff') + "\x01";
  std::vector<std::vector<float>> batches;
  EXPECT_THAT(ReadAll(bytes, &batches), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PullWireTest, AValuesLengthPastItsBatchIsDataLoss) {
  // Found by the fuzzer: a 1-byte batch whose values length byte is the
  // next batch's.
  const std::string bytes("\x0a\x01\x1a\x1a", 4);
  std::vector<std::vector<float>> batches;
  EXPECT_THAT(ReadAll(bytes, &batches), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PullWireTest, AnOverlongVarintIsDataLoss) {
  const std::string bytes = "\x0a" + std::string(11, '\xff');
  std::vector<std::vector<float>> batches;
  EXPECT_THAT(ReadAll(bytes, &batches), StatusIs(absl::StatusCode::kDataLoss));
}

// Regression: a one-value answer is short enough for gRPC to keep it inline,
// and the values written after the writer was made were lost (a single-key
// pull of a dimension-1 table answered garbage).
TEST(PullWireTest, WriterKeepsValuesOfAnAnswerOfEverySize) {
  for (size_t count = 1; count <= 8; ++count) {
    const std::vector<size_t> value_bytes = {count * sizeof(float)};
    PullResponseWriter writer(value_bytes, /*fp16=*/false);
    float* values = reinterpret_cast<float*>(writer.batch_values(0));
    for (size_t i = 0; i < count; ++i) values[i] = 1.5f + i;
    grpc::ByteBuffer buffer = writer.Finish();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    v1::PullResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes)) << count;
    ASSERT_EQ(parsed.batches_size(), 1);
    ASSERT_EQ(parsed.batches(0).values_size(), static_cast<int>(count));
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(parsed.batches(0).values(i), 1.5f + i) << count;
    }
  }
}

}  // namespace
}  // namespace strata
