#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata {

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
}

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(),
                  &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics host '", host, "' is not an IPv4 address"));
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError("cannot create a socket");
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0 ||
      ::listen(listen_fd_, 64) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":",
                                               port, " for metrics: ", reason));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  // Every thread accepts on the listening socket (non-blocking: a thread
  // that loses the race to a connection goes back to poll).
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  stopping_ = false;
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this] { Serve(); });
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

void HttpServer::Stop() {
  if (threads_.empty()) return;
  stopping_ = true;
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::Serve() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    // Wake up now and then to notice Stop().
    if (::poll(&pfd, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeConnection(fd);
    ::close(fd);
  }
}

HttpServer::Response HttpServer::Answer(const std::string& request,
                                        bool* head) const {
  std::vector<std::string> words =
      absl::StrSplit(request.substr(0, request.find('\n')), ' ');
  if (words.size() < 2 || (words[0] != "GET" && words[0] != "HEAD")) {
    return {405, "text/plain; charset=utf-8", "only GET is supported\n"};
  }
  const std::string path = words[1].substr(0, words[1].find('?'));
  auto it = handlers_.find(path);
  if (it == handlers_.end()) {
    return {404, "text/plain; charset=utf-8",
            absl::StrCat("no page ", path, "\n")};
  }
  *head = words[0] == "HEAD";
  return it->second();
}

void HttpServer::ServeConnection(int fd) {
  // One deadline for the whole request, however its bytes arrive.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(options_.request_timeout_ms);
  auto remaining_ms = [&deadline] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(
               deadline - std::chrono::steady_clock::now())
               .count()));
  };
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos && request.size() < 65536) {
    pollfd pfd{fd, POLLIN, 0};
    const int wait = remaining_ms();
    if (wait == 0 || ::poll(&pfd, 1, wait) <= 0) return;  // Too slow: drop.
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  bool head = false;
  const Response response = Answer(request, &head);
  const char* reason = response.status == 200   ? "OK"
                       : response.status == 404 ? "Not Found"
                       : response.status == 405 ? "Method Not Allowed"
                       : response.status == 503 ? "Service Unavailable"
                                                : "Error";
  std::string out = absl::StrCat("HTTP/1.0 ", response.status, " ", reason,
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (!head) out += response.body;
  // The answer is bound by the same deadline: a client that does not read
  // it is dropped too.
  size_t sent = 0;
  while (sent < out.size()) {
    pollfd pfd{fd, POLLOUT, 0};
    const int wait = remaining_ms();
    if (wait == 0 || ::poll(&pfd, 1, wait) <= 0) return;
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace strata
