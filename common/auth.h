#ifndef STRATA_COMMON_AUTH_H_
#define STRATA_COMMON_AUTH_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/string_ref.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace strata {

// Bearer-token authorization of gRPC calls: the client sends
// "authorization: Bearer <token>" metadata on every call; a daemon with a
// token configured checks it in the handlers that need it.

// The metadata the server reads (context->client_metadata()).
using ClientMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// OK when `expected` is empty (no token configured) or the metadata carries
// it. UNAUTHENTICATED when the call has no bearer token, PERMISSION_DENIED
// when it has another one; both messages name `method`. The tokens are
// compared in constant time.
absl::Status CheckBearerToken(const ClientMetadata& metadata,
                              absl::string_view expected,
                              absl::string_view method);

// Adds the token's metadata to `context`; nothing when `token` is empty.
void AddBearerToken(absl::string_view token, grpc::ClientContext& context);

// Equality whose time depends on the lengths only, not on where the
// strings first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace strata

#endif  // STRATA_COMMON_AUTH_H_
