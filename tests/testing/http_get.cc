#include "tests/testing/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata {
namespace testing {

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, n);
  ::close(fd);
  const size_t body = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.0 200", 0) != 0 || body == std::string::npos) {
    return absl::InternalError(absl::StrCat("bad answer: ", answer));
  }
  return answer.substr(body + 4);
}

absl::StatusOr<double> SampleValue(absl::string_view text,
                                   absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, series) && absl::ConsumePrefix(&line, " ")) {
      double value;
      if (absl::SimpleAtod(line, &value)) return value;
    }
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

std::vector<std::string> FamiliesWithoutHelp(absl::string_view text) {
  std::vector<std::string> missing;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "# TYPE ")) continue;
    const std::string name(line.substr(0, line.find(' ')));
    if (!absl::StrContains(text, absl::StrCat("# HELP ", name, " "))) {
      missing.push_back(name);
    }
  }
  return missing;
}

absl::StatusOr<int> MetricsPort(const ServerProcess& server) {
  if (absl::Status logged = server.WaitForLog(" serving on "); !logged.ok()) {
    return logged;
  }
  const std::string log = server.log();
  const size_t at = log.rfind("metrics_port=");
  if (at == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no metrics_port= in ", log));
  }
  const size_t start = at + std::string("metrics_port=").size();
  int port = 0;
  if (!absl::SimpleAtoi(log.substr(start, log.find(' ', start) - start),
                        &port) ||
      port <= 0) {
    return absl::InternalError(absl::StrCat("bad metrics_port= in ", log));
  }
  return port;
}

}  // namespace testing
}  // namespace strata
