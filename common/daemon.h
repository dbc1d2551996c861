#ifndef STRATA_COMMON_DAEMON_H_
#define STRATA_COMMON_DAEMON_H_

#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace strata {

// What every Strata daemon does the same way.

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts
// later. Call first in main, before any thread exists.
sigset_t BlockStopSignals();
// Waits for one of `signals`; returns its number.
int WaitForStopSignal(const sigset_t& signals);

// The transport security of a daemon's gRPC port, from its flags.
struct DaemonSecurity {
  // Insecure unless TLS is configured.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool tls = false;
  // The bearer token calls must carry; empty when none is configured.
  std::string auth_token;
};

// Reads the --tls_cert_file, --tls_key_file, --tls_client_ca_file and
// --auth_token_file files (each optional; empty paths are not read). Errors
// name the flag and the file that could not be read.
absl::StatusOr<DaemonSecurity> LoadDaemonSecurity(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file, const std::string& token_file);

// Logs a WARNING when `host` is reachable beyond this machine while the
// port has no TLS: with no token, anyone can call it; with a token, the
// token crosses the network in the clear.
void WarnIfUnprotected(const char* component, absl::string_view host,
                       const DaemonSecurity& security);

// The largest message a daemon sends or receives; a request whose answer
// would be larger is refused before the answer is built.
inline constexpr uint64_t kMaxMessageBytes = uint64_t{512} << 20;
// The most value bytes one answer (Pull, Lookup) may carry: the message
// limit less room for keys and framing.
inline constexpr uint64_t kMaxAnswerValueBytes =
    kMaxMessageBytes - (uint64_t{16} << 20);

// Starts a gRPC server on host:port (port 0 picks a free one) with the
// standard health service and `services`, refusing to share the port with
// another process (no SO_REUSEPORT). Stores the bound port in *bound_port.
// `credentials` null means insecure. `configure`, when set, is given the
// builder just before the server starts (to add completion queues, say).
// UNAVAILABLE naming the address when it cannot listen.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port,
    const std::vector<grpc::Service*>& services, int* bound_port,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr,
    const std::function<void(grpc::ServerBuilder&)>& configure = nullptr);

}  // namespace strata

#endif  // STRATA_COMMON_DAEMON_H_
