#include "common/client_flags.h"

#include "absl/flags/flag.h"
#include "common/tls.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "Connect over TLS, verifying the server against this PEM CA (the "
          "address's host must match its certificate).");
ABSL_FLAG(std::string, tls_client_cert_file, "",
          "PEM client certificate, for servers that require one.");
ABSL_FLAG(std::string, tls_client_key_file, "",
          "PEM private key of --tls_client_cert_file.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token sent on every call.");

namespace strata {

absl::StatusOr<ClientSecurity> ClientSecurityFromFlags() {
  ClientSecurity security;
  security.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  security.tls_client_cert_file = absl::GetFlag(FLAGS_tls_client_cert_file);
  security.tls_client_key_file = absl::GetFlag(FLAGS_tls_client_key_file);
  const std::string token_file = absl::GetFlag(FLAGS_auth_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile("--auth_token_file", token_file);
    if (!token.ok()) return token.status();
    security.auth_token = *std::move(token);
  }
  return security;
}

}  // namespace strata
