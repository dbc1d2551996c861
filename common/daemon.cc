#include "common/daemon.h"

#include <pthread.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/tls.h"

namespace strata {

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int WaitForStopSignal(const sigset_t& signals) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

absl::StatusOr<DaemonSecurity> LoadDaemonSecurity(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file, const std::string& token_file) {
  DaemonSecurity security;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFromFiles(cert_file, key_file, client_ca_file);
  if (!credentials.ok()) return credentials.status();
  security.credentials = *std::move(credentials);
  security.tls = !cert_file.empty();
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile("--auth_token_file", token_file);
    if (!token.ok()) return token.status();
    security.auth_token = *std::move(token);
  }
  return security;
}

void WarnIfUnprotected(const char* component, absl::string_view host,
                       const DaemonSecurity& security) {
  if (IsLoopbackHost(host) || security.tls) return;
  if (!security.auth_token.empty()) {
    STRATA_LOG(WARNING, component)
        << "listening on non-loopback host " << host
        << " with an auth token but no TLS: the token crosses the network in "
           "the clear, where anyone on the path can read and replay it (see "
           "--tls_cert_file)";
    return;
  }
  STRATA_LOG(WARNING, component)
      << "listening on non-loopback host " << host
      << " with no TLS and no auth token: anyone who can reach the port can "
         "call it (see --tls_cert_file, --auth_token_file)";
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port,
    const std::vector<grpc::Service*>& services, int* bound_port,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    const std::function<void(grpc::ServerBuilder&)>& configure) {
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(host, ":", port);
  *bound_port = 0;
  builder.AddListeningPort(address, credentials, bound_port);
  // Without this, a second server could bind the same port and share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (configure) configure(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     ": the port is in use or the address is not local"));
  }
  return server;
}

}  // namespace strata
