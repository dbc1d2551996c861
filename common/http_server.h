#ifndef STRATA_COMMON_HTTP_SERVER_H_
#define STRATA_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// The HTTP server of a daemon's metrics port (/healthz, /metrics, status
// pages): GET and HEAD only, each connection closed after its answer. A
// fixed pool of threads accepts and serves connections, so several are
// served at once, and each request has a total deadline (not one per read),
// so that a client trickling bytes holds one thread for at most that long
// and never blocks the health check. Handlers are registered before Start
// and run on the pool's threads (they must be thread-safe); Start and Stop
// are not thread-safe.
//
// Why not CivetWeb (Debian's libcivetweb, which prometheus-cpp's exposer
// uses): it creates its threads with a fixed 100 KiB stack, too small for the
// static TLS of strata-worker's CUDA and OpenBLAS libraries, so it cannot
// start a thread there at all.
class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;

  struct Options {
    // Connections served at once. Default: 4.
    int threads = 4;
    // Most time one connection may take, from its accept to the end of the
    // answer. Default: 5 s.
    int request_timeout_ms = 5000;
  };

  HttpServer() : HttpServer(Options()) {}
  explicit HttpServer(const Options& options) : options_(options) {}
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
  // The answer to a request's text; *head for a HEAD request.
  Response Answer(const std::string& request, bool* head) const;

  const Options options_;
  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace strata

#endif  // STRATA_COMMON_HTTP_SERVER_H_
