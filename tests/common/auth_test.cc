#include "common/auth.h"

#include <string>

#include "common/tls.h"
#include "gmock/gmock.h"
#include "grpcpp/support/string_ref.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_certs.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

// Metadata pointing into `value`, which must outlive it (a temporary lives
// to the end of the full expression, as in the calls below).
ClientMetadata Metadata(const std::string& value) {
  ClientMetadata metadata;
  metadata.emplace(grpc::string_ref("authorization"), grpc::string_ref(value));
  return metadata;
}

TEST(CheckBearerTokenTest, NoConfiguredTokenLetsEveryCallThrough) {
  EXPECT_THAT(CheckBearerToken(ClientMetadata(), "", "Push"), IsOk());
}

TEST(CheckBearerTokenTest, MissingTokenIsUnauthenticatedNamingTheMethod) {
  EXPECT_THAT(CheckBearerToken(ClientMetadata(), "t", "Push"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Push")));
  EXPECT_THAT(CheckBearerToken(Metadata("Basic t"), "t", "Push"),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(CheckBearerTokenTest, WrongTokenIsPermissionDenied) {
  EXPECT_THAT(
      CheckBearerToken(Metadata("Bearer x"), "t", "Restore"),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("Restore")));
  EXPECT_THAT(CheckBearerToken(Metadata("Bearer tt"), "t", "Restore"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(CheckBearerTokenTest, RightTokenPasses) {
  EXPECT_THAT(CheckBearerToken(Metadata("Bearer t0k"), "t0k", "Push"), IsOk());
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ReadTokenFileTest, StripsTheTrailingNewlineAndNamesBadFiles) {
  testing::TempDir dir("token");
  const std::string path = dir.path() + "/token";
  ASSERT_THAT(testing::WriteTextFile(path, "abc\n"), IsOk());
  EXPECT_THAT(ReadTokenFile("--auth_token_file", path), IsOkAndHolds("abc"));
  ASSERT_THAT(testing::WriteTextFile(path, ""), IsOk());
  EXPECT_THAT(ReadTokenFile("--auth_token_file", path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
  EXPECT_THAT(ReadTokenFile("--auth_token_file", path + ".missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(".missing")));
}

TEST(CredentialsFromFilesTest, CertificateAndKeyGoTogether) {
  EXPECT_THAT(ServerCredentialsFromFiles("cert.pem", "", "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ChannelCredentialsFromFiles("ca.pem", "", "key.pem").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ServerCredentialsFromFiles("", "", "").status(), IsOk());
  EXPECT_THAT(ChannelCredentialsFromFiles("", "", "").status(), IsOk());
}

TEST(IsLoopbackHostTest, KnowsLocalAddresses) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("[::1]"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.1.2.3"));
  EXPECT_FALSE(IsLoopbackHost("::"));
}

}  // namespace
}  // namespace strata
