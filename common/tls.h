#ifndef STRATA_COMMON_TLS_H_
#define STRATA_COMMON_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace strata {

// Transport security of the daemons and their clients, built from files
// (secrets never come from flags, which show in `ps`). Every reader fails
// naming the flag and the file: NOT_FOUND when it cannot be opened,
// FAILED_PRECONDITION when reading fails, INVALID_ARGUMENT when it is
// empty.

// Reads a file holding a secret (PEM or token) whole. INVALID_ARGUMENT
// naming `flag` and the file when it is empty.
absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag,
                                           const std::string& path);

// Reads a bearer token: the file's text with trailing whitespace (the
// newline an editor adds) stripped.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path);

// Server credentials: insecure when cert_file and key_file are both empty;
// TLS with that certificate chain and key otherwise. A non-empty
// client_ca_file makes clients present a certificate signed by that CA.
// INVALID_ARGUMENT when only one of cert_file and key_file is given, or a
// client CA without a certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentialsFromFiles(const std::string& cert_file,
                           const std::string& key_file,
                           const std::string& client_ca_file);

// Channel credentials: insecure when ca_file is empty; TLS verifying the
// server against the CA in ca_file otherwise, presenting the client
// certificate in cert_file/key_file when given (both or neither).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
ChannelCredentialsFromFiles(const std::string& ca_file,
                            const std::string& cert_file,
                            const std::string& key_file);

// True for addresses only local clients reach: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackHost(absl::string_view host);

}  // namespace strata

#endif  // STRATA_COMMON_TLS_H_
