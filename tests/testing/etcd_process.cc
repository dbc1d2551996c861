#include "tests/testing/etcd_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordination/etcd_client.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace testing {

int PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

EtcdProcess::EtcdProcess() : dir_("etcd") {}

std::string EtcdProcess::endpoint() const {
  return absl::StrCat("127.0.0.1:", client_port_);
}

absl::Status EtcdProcess::Start() {
  client_port_ = PickFreePort();
  const int peer_port = PickFreePort();
  if (client_port_ == 0 || peer_port == 0) {
    return absl::InternalError("no free port for etcd");
  }
  const char* binary = std::getenv("STRATA_ETCD");
  const std::string client_url = absl::StrCat("http://", endpoint());
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
  ServerProcessOptions options;
  options.binary = binary != nullptr ? binary : "/usr/bin/etcd";
  options.daemon_flags = false;
  options.flags = {
      "--name=test",
      absl::StrCat("--data-dir=", dir_.path(), "/data"),
      absl::StrCat("--listen-client-urls=", client_url),
      absl::StrCat("--advertise-client-urls=", client_url),
      absl::StrCat("--listen-peer-urls=", peer_url),
      absl::StrCat("--initial-advertise-peer-urls=", peer_url),
      absl::StrCat("--initial-cluster=test=", peer_url),
      "--heartbeat-interval=50",
      "--election-timeout=500",
  };
  process_ = std::make_unique<ServerProcess>(options);
  if (absl::Status s = process_->Launch(); !s.ok()) return s;
  EtcdClientOptions client_options;
  client_options.endpoints = {endpoint()};
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(client_options);
  if (!client.ok()) return client.status();
  if (!WaitUntil([&] { return (*client)->Get("/probe").ok(); },
                 absl::Seconds(30), absl::Milliseconds(100))) {
    return absl::DeadlineExceededError(
        absl::StrCat("etcd did not answer; its log:\n", process_->log()));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace strata
