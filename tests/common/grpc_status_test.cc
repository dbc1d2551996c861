#include "common/grpc_status.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

// Every google.rpc.Code, paired by name rather than by number.
struct CodePair {
  absl::StatusCode absl_code;
  grpc::StatusCode grpc_code;
  int number;
};

constexpr CodePair kAllCodes[] = {
    {absl::StatusCode::kOk, grpc::StatusCode::OK, 0},
    {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED, 1},
    {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN, 2},
    {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT, 3},
    {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED,
     4},
    {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND, 5},
    {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS, 6},
    {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED,
     7},
    {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED,
     8},
    {absl::StatusCode::kFailedPrecondition,
     grpc::StatusCode::FAILED_PRECONDITION, 9},
    {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED, 10},
    {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE, 11},
    {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED, 12},
    {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL, 13},
    {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE, 14},
    {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS, 15},
    {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED, 16},
};

TEST(GrpcStatusTest, CoversAllSeventeenCodes) {
  EXPECT_EQ(sizeof(kAllCodes) / sizeof(kAllCodes[0]), 17u);
  for (int i = 0; i < 17; ++i) EXPECT_EQ(kAllCodes[i].number, i);
}

TEST(GrpcStatusTest, OkConvertsToOkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::OkStatus()).error_message(), "");
  EXPECT_THAT(FromGrpcStatus(grpc::Status::OK), IsOk());
}

TEST(GrpcStatusTest, EveryErrorCodeAndMessageRoundTripsFromAbsl) {
  for (const CodePair& pair : kAllCodes) {
    if (pair.absl_code == absl::StatusCode::kOk) continue;
    const std::string message = absl::StrCat("message of code ", pair.number);
    const absl::Status original(pair.absl_code, message);
    const grpc::Status converted = ToGrpcStatus(original);
    EXPECT_EQ(converted.error_code(), pair.grpc_code) << pair.number;
    EXPECT_EQ(converted.error_message(), message) << pair.number;
    EXPECT_EQ(FromGrpcStatus(converted), original) << pair.number;
  }
}

TEST(GrpcStatusTest, EveryErrorCodeAndMessageRoundTripsFromGrpc) {
  for (const CodePair& pair : kAllCodes) {
    if (pair.grpc_code == grpc::StatusCode::OK) continue;
    const std::string message = absl::StrCat("grpc message ", pair.number);
    const grpc::Status original(pair.grpc_code, message);
    const absl::Status converted = FromGrpcStatus(original);
    EXPECT_THAT(converted, StatusIs(pair.absl_code, message)) << pair.number;
    const grpc::Status back = ToGrpcStatus(converted);
    EXPECT_EQ(back.error_code(), pair.grpc_code) << pair.number;
    EXPECT_EQ(back.error_message(), message) << pair.number;
  }
}

TEST(GrpcStatusTest, MessageBytesAreKeptVerbatim) {
  constexpr char kBytes[] = "table 'x': \xC3\xA9\n\t with a \0 byte";
  const std::string message(kBytes, sizeof(kBytes) - 1);
  ASSERT_EQ(message.size(), 29u);  // The NUL byte included.
  const absl::Status original = absl::InvalidArgumentError(message);
  const grpc::Status converted = ToGrpcStatus(original);
  EXPECT_EQ(converted.error_message(), message);
  EXPECT_EQ(FromGrpcStatus(converted), original);
}

}  // namespace
}  // namespace strata
