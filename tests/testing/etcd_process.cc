#include "tests/testing/etcd_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordination/etcd_client.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace testing {

namespace {

// The kernel's range for ephemeral ports (those bind(0) and outgoing
// connections take). Falls back to Linux's default.
std::pair<int, int> EphemeralPortRange() {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  int high = 60999;
  if (!(file >> low >> high)) return {32768, 60999};
  return {low, high};
}

bool CanBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound =
      ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return bound;
}

absl::Mutex port_draw_mutex(absl::kConstInit);
std::mt19937* port_bits ABSL_GUARDED_BY(port_draw_mutex) = nullptr;

int DrawPort(std::uniform_int_distribution<int>& ports) {
  absl::MutexLock lock(&port_draw_mutex);
  if (port_bits == nullptr) {
    port_bits = new std::mt19937(std::random_device{}());
  }
  return ports(*port_bits);
}

}  // namespace

int PickFreePort() {
  // A port below the ephemeral range: one that bind(0) handed out could be
  // taken, between its release and the child's bind, by any outgoing
  // connection on the machine (a test's own gRPC channels included).
  const auto [ephemeral_low, ephemeral_high] = EphemeralPortRange();
  int low = 10000;
  int high = ephemeral_low - 1;
  if (high - low < 1000) {  // An unusual range: use the ports above it.
    low = ephemeral_high + 1;
    high = 65535;
  }
  if (high - low < 1000) {  // Neither: any unprivileged port.
    low = 1024;
    high = 65535;
  }
  std::uniform_int_distribution<int> ports(low, high);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = DrawPort(ports);
    if (CanBind(port)) return port;
  }
  return 0;
}

EtcdProcess::EtcdProcess(int first_client_port)
    : dir_("etcd"), first_client_port_(first_client_port) {}

std::string EtcdProcess::endpoint() const {
  return absl::StrCat("127.0.0.1:", client_port_);
}

absl::Status EtcdProcess::Start() {
  // A port found free can still be taken before etcd binds it; etcd then
  // exits at once, and a fresh pair of ports is tried.
  constexpr int kAttempts = 3;
  absl::Status status;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    status = StartOnFreshPorts(absl::StrCat(dir_.path(), "/data", attempt));
    if (status.ok() || !absl::IsUnavailable(status)) return status;
  }
  return status;
}

absl::Status EtcdProcess::StartOnFreshPorts(const std::string& data_dir) {
  client_port_ = first_client_port_ != 0 ? first_client_port_ : PickFreePort();
  first_client_port_ = 0;
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
      absl::StrCat("--data-dir=", data_dir),
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
  bool exited = false;
  const bool answered = WaitUntil(
      [&] {
        exited = process_->HasExited();
        return exited || (*client)->Get("/probe").ok();
      },
      absl::Seconds(30), absl::Milliseconds(100));
  if (exited) {
    const std::string log = process_->log();
    const std::string message = absl::StrCat("etcd exited; its log:\n", log);
    if (absl::StrContains(log, "address already in use")) {
      return absl::UnavailableError(message);
    }
    return absl::InternalError(message);
  }
  if (!answered) {
    return absl::DeadlineExceededError(
        absl::StrCat("etcd did not answer; its log:\n", process_->log()));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace strata
