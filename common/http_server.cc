#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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
      ::listen(listen_fd_, 16) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":",
                                               port, " for metrics: ", reason));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  thread_ = std::thread([this] { Serve(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  thread_.join();
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

void HttpServer::ServeConnection(int fd) {
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  std::vector<std::string> words =
      absl::StrSplit(request.substr(0, request.find('\n')), ' ');
  Response response;
  if (words.size() < 2 || (words[0] != "GET" && words[0] != "HEAD")) {
    response = {405, "text/plain; charset=utf-8", "only GET is supported\n"};
  } else {
    const std::string path = words[1].substr(0, words[1].find('?'));
    auto it = handlers_.find(path);
    if (it == handlers_.end()) {
      response = {404, "text/plain; charset=utf-8",
                  absl::StrCat("no page ", path, "\n")};
    } else {
      response = it->second();
    }
  }
  const char* reason = response.status == 200   ? "OK"
                       : response.status == 404 ? "Not Found"
                       : response.status == 503 ? "Service Unavailable"
                                                : "Error";
  std::string out =
      absl::StrCat("HTTP/1.0 ", response.status, " ", reason,
                   "\r\nContent-Type: ", response.content_type,
                   "\r\nContent-Length: ", response.body.size(),
                   "\r\nConnection: close\r\n\r\n", response.body);
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n =
        ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace strata
