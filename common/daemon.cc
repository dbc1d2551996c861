#include "common/daemon.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"

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

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port,
    const std::vector<grpc::Service*>& services, int* bound_port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(host, ":", port);
  *bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           bound_port);
  // Without this, a second server could bind the same port and share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     ": the port is in use or the address is not local"));
  }
  return server;
}

}  // namespace strata
