#ifndef STRATA_TESTS_TESTING_TCP_PROXY_H_
#define STRATA_TESTS_TESTING_TCP_PROXY_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace testing {

// A TCP proxy on a free loopback port that forwards every connection to
// `target` (host:port), for cutting a process off from a server: Cut()
// closes every connection and refuses new ones until Restore(). Thread-safe.
class TcpProxy {
 public:
  explicit TcpProxy(std::string target_host, int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // Listens and starts forwarding. INTERNAL when no port can be bound.
  absl::Status Start();
  // "127.0.0.1:<port>".
  std::string address() const;
  int port() const { return port_; }
  void Cut();
  void Restore();

 private:
  void AcceptLoop();
  void Forward(int client);

  const std::string target_host_;
  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cut_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> sockets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_TCP_PROXY_H_
