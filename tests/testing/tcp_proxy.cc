#include "tests/testing/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {
namespace testing {
namespace {

sockaddr_in LoopbackAddress(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

// Copies from `from` to `to` until either side closes. Sends with
// MSG_NOSIGNAL: a Cut() or the peer may close `to` mid-copy, and that must end
// this pump, not kill the test with SIGPIPE.
void Pump(int from, int to) {
  char buffer[16384];
  while (true) {
    const ssize_t n = ::read(from, buffer, sizeof(buffer));
    if (n <= 0) break;
    ssize_t sent = 0;
    while (sent < n) {
      const ssize_t w = ::send(to, buffer + sent, n - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += w;
    }
    if (sent < n) break;
  }
  ::shutdown(to, SHUT_RDWR);
  ::shutdown(from, SHUT_RDWR);
}

}  // namespace

TcpProxy::TcpProxy(std::string target_host, int target_port)
    : target_host_(std::move(target_host)), target_port_(target_port) {}

TcpProxy::~TcpProxy() {
  stopping_.store(true);
  Cut();
  if (listener_ >= 0) ::shutdown(listener_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listener_ >= 0) ::close(listener_);
  std::vector<std::thread> pumps;
  {
    absl::MutexLock lock(&mu_);
    pumps.swap(pumps_);
  }
  for (std::thread& pump : pumps) pump.join();
  absl::MutexLock lock(&mu_);
  for (int fd : sockets_) ::close(fd);
}

absl::Status TcpProxy::Start() {
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = LoopbackAddress(0);
  socklen_t length = sizeof(address);
  if (listener_ < 0 ||
      ::bind(listener_, reinterpret_cast<sockaddr*>(&address),
             sizeof(address)) != 0 ||
      ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address),
                    &length) != 0) {
    return absl::InternalError("the proxy cannot listen");
  }
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

std::string TcpProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpProxy::Cut() {
  cut_.store(true);
  absl::MutexLock lock(&mu_);
  for (int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
}

void TcpProxy::Restore() { cut_.store(false); }

void TcpProxy::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd ready{listener_, POLLIN, 0};
    if (::poll(&ready, 1, 50) <= 0) continue;
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    if (cut_.load()) {
      ::close(client);
      continue;
    }
    Forward(client);
  }
}

void TcpProxy::Forward(int client) {
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in target = LoopbackAddress(target_port_);
  ::inet_pton(AF_INET, target_host_.c_str(), &target.sin_addr);
  if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&target),
                              sizeof(target)) != 0) {
    ::close(client);
    if (server >= 0) ::close(server);
    return;
  }
  absl::MutexLock lock(&mu_);
  sockets_.push_back(client);
  sockets_.push_back(server);
  pumps_.emplace_back(Pump, client, server);
  pumps_.emplace_back(Pump, server, client);
}

}  // namespace testing
}  // namespace strata
