#include "common/tls.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace strata {

absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag,
                                           const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read file ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": error reading file ", path));
  }
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": file ", path, " is empty"));
  }
  return text.str();
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(flag, path);
  if (!text.ok()) return text.status();
  std::string token(absl::StripTrailingAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": file ", path, " holds no token"));
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
ServerCredentialsFromFiles(const std::string& cert_file,
                           const std::string& key_file,
                           const std::string& client_ca_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or "
        "neither");
  }
  if (cert_file.empty()) {
    if (!client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs --tls_cert_file and --tls_key_file");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::string> cert =
      ReadSecretFile("--tls_cert_file", cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadSecretFile("--tls_key_file", key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadSecretFile("--tls_client_ca_file", client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
ChannelCredentialsFromFiles(const std::string& ca_file,
                            const std::string& cert_file,
                            const std::string& key_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_cert_file and tls_client_key_file go together: give "
        "both or neither");
  }
  if (ca_file.empty()) {
    if (!cert_file.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs tls_ca_file (TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadSecretFile("tls_ca_file", ca_file);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (!cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadSecretFile("tls_client_cert_file", cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadSecretFile("tls_client_key_file", key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace strata
