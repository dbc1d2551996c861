#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::HttpGet;
using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// A connection to 127.0.0.1:port that has sent `bytes` and waits.
int OpenAndSend(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  return fd;
}

// What the server answers on a connection that sent `request`.
std::string Exchange(int port, const std::string& request) {
  const int fd = OpenAndSend(port, request);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return answer;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Handle("/healthz", [] {
      return HttpServer::Response{200, "text/plain", "ok\n"};
    });
    server_.Handle("/down", [] {
      return HttpServer::Response{503, "text/plain", "not ready\n"};
    });
    absl::StatusOr<int> port = server_.Start("127.0.0.1", 0);
    ASSERT_THAT(port.status(), IsOk());
    port_ = *port;
  }

  HttpServer server_{HttpServer::Options{/*threads=*/4,
                                         /*request_timeout_ms=*/1500}};
  int port_ = 0;
};

TEST_F(HttpServerTest, AnswersRegisteredPathsOnly) {
  EXPECT_THAT(HttpGet(port_, "/healthz"), IsOkAndHolds("ok\n"));
  EXPECT_THAT(HttpGet(port_, "/healthz/more"), Not(IsOk()));
  EXPECT_THAT(HttpGet(port_, "/nothing"), Not(IsOk()));
  EXPECT_THAT(Exchange(port_, "GET /down HTTP/1.0\r\n\r\n"), HasSubstr("503"));
}

TEST_F(HttpServerTest, OnlyGetAndHead) {
  EXPECT_THAT(Exchange(port_,
                       "POST /healthz HTTP/1.0\r\nContent-Length: "
                       "0\r\n\r\n"),
              HasSubstr("405"));
  const std::string head = Exchange(port_, "HEAD /healthz HTTP/1.0\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("200"));
  EXPECT_THAT(head, Not(HasSubstr("ok\n")));
}

TEST_F(HttpServerTest, SlowClientsDoNotHoldTheHealthCheck) {
  // Three clients that send part of a request and stall (a trickle resets
  // no deadline: each request has a total one).
  std::vector<int> stalled;
  for (int i = 0; i < 3; ++i) {
    stalled.push_back(OpenAndSend(port_, "GET /healthz HT"));
  }
  const absl::Time start = absl::Now();
  EXPECT_THAT(HttpGet(port_, "/healthz"), IsOkAndHolds("ok\n"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // The stalled ones are closed once their time is up.
  for (int fd : stalled) {
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char buffer[1024];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "not closed by the server";
    EXPECT_LT(absl::Now() - start, absl::Seconds(8));
    ::close(fd);
  }
}

TEST_F(HttpServerTest, ATrickleOfBytesDoesNotExtendTheDeadline) {
  const int fd = OpenAndSend(port_, "G");
  const absl::Time start = absl::Now();
  // One byte every 100 ms would keep a per-read timeout from ever firing.
  bool closed = false;
  for (const char byte : std::string("ET /healthz HTTP/1.0 with more words")) {
    absl::SleepFor(absl::Milliseconds(100));
    if (::send(fd, &byte, 1, MSG_NOSIGNAL) < 0) {
      closed = true;
      break;
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      char buffer[64];
      if (::recv(fd, buffer, sizeof(buffer), 0) <= 0) {
        closed = true;
        break;
      }
    }
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(2500));
  ::close(fd);
}

TEST_F(HttpServerTest, APortInUseIsUnavailable) {
  HttpServer second;
  EXPECT_THAT(
      second.Start("127.0.0.1", port_),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr(absl::StrCat(port_))));
}

}  // namespace
}  // namespace strata
