#include "common/auth.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/client_context.h"

namespace strata {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "Bearer ";

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walks all of `a` whatever `b` holds, so the time reveals no prefix.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char other =
        b.empty() ? 0 : static_cast<unsigned char>(b[i % b.size()]);
    diff |= static_cast<unsigned char>(a[i]) ^ other;
  }
  return diff == 0;
}

absl::Status CheckBearerToken(const ClientMetadata& metadata,
                              absl::string_view expected,
                              absl::string_view method) {
  if (expected.empty()) return absl::OkStatus();
  auto found = metadata.find(kAuthorization);
  if (found == metadata.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, " needs a bearer token (authorization metadata)"));
  }
  absl::string_view value(found->second.data(), found->second.size());
  if (!absl::ConsumePrefix(&value, kBearer) || value.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        method, ": the authorization metadata is not 'Bearer <token>'"));
  }
  if (!ConstantTimeEquals(value, expected)) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, ": the bearer token is not accepted"));
  }
  return absl::OkStatus();
}

void AddBearerToken(absl::string_view token, grpc::ClientContext& context) {
  if (token.empty()) return;
  context.AddMetadata(kAuthorization, absl::StrCat(kBearer, token));
}

}  // namespace strata
