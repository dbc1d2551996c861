// The test proxy that cuts a process off from etcd: a Cut() while bytes are
// in flight must end the connections, never the process that holds the
// proxy (a send on a socket shut down under it raises SIGPIPE unless asked
// not to).

#include "tests/testing/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace testing {
namespace {

// A loopback server that accepts connections and never reads from them, so
// that a pump forwarding to it ends up blocked in a send.
class SilentServer {
 public:
  SilentServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address),
                     sizeof(address)),
              0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address),
                            &length),
              0);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] {
      while (!stopping_.load()) {
        pollfd ready{listener_, POLLIN, 0};
        if (::poll(&ready, 1, 20) <= 0) continue;
        const int fd = ::accept(listener_, nullptr, nullptr);
        if (fd < 0) continue;
        accepted_.push_back(fd);
        connections_.fetch_add(1);
      }
    });
  }
  ~SilentServer() {
    stopping_.store(true);
    acceptor_.join();
    for (int fd : accepted_) ::close(fd);
    ::close(listener_);
  }
  int port() const { return port_; }
  // Connections accepted so far.
  int connections() const { return connections_.load(); }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::vector<int> accepted_;  // only the acceptor thread touches it
};

int ConnectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Sends without blocking until the kernel takes no more: every buffer on the
// way (client, proxy, server) is full, and the proxy's pump waits in a send.
bool FillUntilStalled(int fd) {
  const std::string chunk(64 * 1024, 'x');
  return WaitUntil(
      [&] {
        const ssize_t sent =
            ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        return sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      },
      absl::Seconds(10), absl::Milliseconds(1));
}

// True once the peer has closed or reset `fd`.
bool PeerClosed(int fd) {
  char buffer[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

TEST(TcpProxyTest, ACutWhileAPumpIsBlockedInASendClosesTheConnection) {
  SilentServer server;
  TcpProxy proxy("127.0.0.1", server.port());
  ASSERT_THAT(proxy.Start(), IsOk());
  // Several rounds: each has a pump blocked sending to the silent server
  // when the cut comes.
  for (int round = 0; round < 5; ++round) {
    const int client = ConnectTo(proxy.port());
    ASSERT_TRUE(FillUntilStalled(client)) << "round " << round;
    proxy.Cut();
    EXPECT_TRUE(WaitUntil([&] { return PeerClosed(client); }, absl::Seconds(10),
                          absl::Milliseconds(5)))
        << "round " << round;
    ::close(client);
    proxy.Restore();
  }
}

TEST(TcpProxyTest, ACutConnectionIsRefusedUntilRestored) {
  SilentServer server;
  TcpProxy proxy("127.0.0.1", server.port());
  ASSERT_THAT(proxy.Start(), IsOk());
  proxy.Cut();
  const int refused = ConnectTo(proxy.port());
  EXPECT_TRUE(WaitUntil([&] { return PeerClosed(refused); }, absl::Seconds(10),
                        absl::Milliseconds(5)));
  ::close(refused);
  EXPECT_EQ(server.connections(), 0) << "a cut proxy reached the server";
  proxy.Restore();
  const int forwarded = ConnectTo(proxy.port());
  EXPECT_TRUE(WaitUntil([&] { return server.connections() == 1; },
                        absl::Seconds(10), absl::Milliseconds(5)));
  const std::string hello = "hello";
  EXPECT_EQ(::send(forwarded, hello.data(), hello.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hello.size()));
  // Forwarded, so nothing closes it while the server holds it open.
  EXPECT_FALSE(PeerClosed(forwarded));
  ::close(forwarded);
}

}  // namespace
}  // namespace testing
}  // namespace strata
