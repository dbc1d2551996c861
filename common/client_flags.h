#ifndef STRATA_COMMON_CLIENT_FLAGS_H_
#define STRATA_COMMON_CLIENT_FLAGS_H_

// The security flags of Strata's command-line clients (stratactl,
// strata-lookup), defined once so that they mean the same everywhere:
// --tls_ca_file, --tls_client_cert_file, --tls_client_key_file and
// --auth_token_file.

#include <string>

#include "absl/status/statusor.h"

namespace strata {

struct ClientSecurity {
  std::string tls_ca_file;
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  // The token read from --auth_token_file; empty without one.
  std::string auth_token;
};

// The flags' values, with the token file read. An error names the file.
absl::StatusOr<ClientSecurity> ClientSecurityFromFlags();

}  // namespace strata

#endif  // STRATA_COMMON_CLIENT_FLAGS_H_
