#ifndef STRATA_COMMON_HTTP_SERVER_H_
#define STRATA_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// A minimal HTTP/1.0 server for /healthz and /metrics: GET only, one
// connection at a time, each closed after its response. Not for traffic.
// Handlers are registered before Start; Start and Stop are not thread-safe.
class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;

  HttpServer() = default;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(const std::string& path, Handler handler);

  // Binds host:port (port 0 picks a free one) and serves in a thread.
  // Returns the bound port. UNAVAILABLE when the port is in use.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void Serve();
  void ServeConnection(int fd);

  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_COMMON_HTTP_SERVER_H_
