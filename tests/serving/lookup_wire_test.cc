#include "serving/internal/lookup_wire.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"

namespace strata {
namespace serving_internal {
namespace {

std::string BytesOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// Multiples of 0.5 from -3 to 1020.5: exact in half floats too.
float ValueAt(size_t i) { return static_cast<float>(i % 2048) * 0.5f - 3.0f; }

// Writes `num_values` values and parses the answer back.
v1::LookupResponse WriteAndParse(size_t num_values, uint32_t dim,
                                 uint32_t missing, bool fp16 = false) {
  LookupResponseWriter writer(num_values, fp16);
  absl::Span<float> values = writer.values();
  EXPECT_EQ(values.size(), num_values);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values.data()) % 16, 0u);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = ValueAt(i);
  }
  v1::LookupResponse parsed;
  EXPECT_TRUE(parsed.ParseFromString(BytesOf(writer.Finish(dim, missing))));
  return parsed;
}

TEST(LookupResponseWriterTest, ParsesAsTheProtobufMessageForEverySize) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{31}, size_t{32},
                   size_t{1000}, size_t{1000 * 64}}) {
    SCOPED_TRACE(n);
    const v1::LookupResponse parsed = WriteAndParse(n, 7, 2);
    EXPECT_EQ(parsed.dim(), 7u);
    EXPECT_EQ(parsed.num_missing(), 2u);
    ASSERT_EQ(static_cast<size_t>(parsed.values_size()), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(parsed.values(static_cast<int>(i)), ValueAt(i)) << i;
    }
  }
}

TEST(LookupResponseWriterTest, WritesHalfFloatsInValuesFp16) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{1000 * 64}}) {
    SCOPED_TRACE(n);
    const v1::LookupResponse parsed = WriteAndParse(n, 5, 1, /*fp16=*/true);
    EXPECT_EQ(parsed.dim(), 5u);
    EXPECT_EQ(parsed.num_missing(), 1u);
    EXPECT_EQ(parsed.values_size(), 0);
    ASSERT_EQ(parsed.values_fp16().size(), n * sizeof(uint16_t));
    std::vector<float> values(n);
    HalvesToFloats(
        reinterpret_cast<const uint16_t*>(parsed.values_fp16().data()), n,
        values.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(values[i], ValueAt(i)) << i;
    }
  }
}

TEST(LookupResponseWriterTest, CarriesLargeAndZeroCounts) {
  const v1::LookupResponse large = WriteAndParse(2, UINT32_MAX, UINT32_MAX);
  EXPECT_EQ(large.dim(), UINT32_MAX);
  EXPECT_EQ(large.num_missing(), UINT32_MAX);
  const v1::LookupResponse zero = WriteAndParse(2, 1, 0);
  EXPECT_EQ(zero.dim(), 1u);
  EXPECT_EQ(zero.num_missing(), 0u);
  EXPECT_THAT(zero.values(), ::testing::ElementsAre(-3.0f, -2.5f));
}

}  // namespace
}  // namespace serving_internal
}  // namespace strata
