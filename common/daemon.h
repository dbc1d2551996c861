#ifndef STRATA_COMMON_DAEMON_H_
#define STRATA_COMMON_DAEMON_H_

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace strata {

// What every Strata daemon does the same way.

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts
// later. Call first in main, before any thread exists.
sigset_t BlockStopSignals();
// Waits for one of `signals`; returns its number.
int WaitForStopSignal(const sigset_t& signals);

// Starts a gRPC server on host:port (port 0 picks a free one) with the
// standard health service and `services`, refusing to share the port with
// another process (no SO_REUSEPORT). Stores the bound port in *bound_port.
// UNAVAILABLE naming the address when it cannot listen.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port,
    const std::vector<grpc::Service*>& services, int* bound_port);

}  // namespace strata

#endif  // STRATA_COMMON_DAEMON_H_
