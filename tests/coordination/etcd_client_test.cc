// EtcdClient against a real etcd started by the test.

#include "coordination/etcd_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::EtcdProcess;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::strata::testing::WaitUntil;
using ::testing::HasSubstr;

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(etcd_.Start(), IsOk());
    EtcdClientOptions options;
    options.endpoints = {etcd_.endpoint()};
    absl::StatusOr<std::unique_ptr<EtcdClient>> client =
        EtcdClient::Create(options);
    ASSERT_THAT(client.status(), IsOk());
    client_ = *std::move(client);
  }

  EtcdProcess etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST_F(EtcdClientTest, CreateIfAbsentWinsOnce) {
  absl::StatusOr<std::optional<int64_t>> first =
      client_->CreateIfAbsent("/t/leader", "a", 0);
  ASSERT_THAT(first.status(), IsOk());
  ASSERT_TRUE(first->has_value());
  absl::StatusOr<std::optional<int64_t>> second =
      client_->CreateIfAbsent("/t/leader", "b", 0);
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_FALSE(second->has_value());
  absl::StatusOr<std::optional<EtcdKeyValue>> read = client_->Get("/t/leader");
  ASSERT_THAT(read.status(), IsOk());
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->value, "a");
  EXPECT_EQ((*read)->create_revision, **first);
}

TEST_F(EtcdClientTest, DeleteIfCreatedAtDeletesOnlyThatKey) {
  auto created = client_->CreateIfAbsent("/t/k", "v", 0);
  ASSERT_THAT(created.status(), IsOk());
  EXPECT_THAT(client_->DeleteIfCreatedAt("/t/k", **created + 100),
              ::strata::testing::IsOkAndHolds(false));
  EXPECT_THAT(client_->DeleteIfCreatedAt("/t/k", **created),
              ::strata::testing::IsOkAndHolds(true));
  auto read = client_->Get("/t/k");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_FALSE(read->has_value());
}

TEST_F(EtcdClientTest, PutIfModifiedAtIsACompareAndSwap) {
  ASSERT_THAT(client_->Put("/t/map", "v1").status(), IsOk());
  auto read = client_->Get("/t/map");
  ASSERT_THAT(read.status(), IsOk());
  const int64_t revision = (*read)->mod_revision;
  EXPECT_THAT(client_->PutIfModifiedAt("/t/map", "v2", revision),
              ::strata::testing::IsOkAndHolds(true));
  // The same expected revision again: someone (we) changed it since.
  EXPECT_THAT(client_->PutIfModifiedAt("/t/map", "v3", revision),
              ::strata::testing::IsOkAndHolds(false));
  read = client_->Get("/t/map");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ((*read)->value, "v2");
}

TEST_F(EtcdClientTest, GetPrefixListsKeysInOrder) {
  ASSERT_THAT(client_->Put("/t/members/b", "2").status(), IsOk());
  ASSERT_THAT(client_->Put("/t/members/a", "1").status(), IsOk());
  ASSERT_THAT(client_->Put("/t/membersX", "no").status(), IsOk());
  auto members = client_->GetPrefix("/t/members/");
  ASSERT_THAT(members.status(), IsOk());
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].value, "1");
  EXPECT_EQ((*members)[1].value, "2");
}

TEST_F(EtcdClientTest, KeyOfAnExpiredLeaseIsGoneAndKeepAliveSaysNotFound) {
  absl::StatusOr<int64_t> lease = client_->GrantLease(absl::Seconds(1));
  ASSERT_THAT(lease.status(), IsOk());
  ASSERT_THAT(client_->Put("/t/leased", "x", *lease).status(), IsOk());
  EXPECT_THAT(client_->KeepAlive(*lease).status(), IsOk());
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto read = client_->Get("/t/leased");
        return read.ok() && !read->has_value();
      },
      absl::Seconds(10), absl::Milliseconds(100)));
  EXPECT_THAT(client_->KeepAlive(*lease).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(EtcdClientTest, RevokedLeaseTakesItsKeysAtOnce) {
  absl::StatusOr<int64_t> lease = client_->GrantLease(absl::Seconds(30));
  ASSERT_THAT(lease.status(), IsOk());
  ASSERT_THAT(client_->Put("/t/leased", "x", *lease).status(), IsOk());
  ASSERT_THAT(client_->RevokeLease(*lease), IsOk());
  auto read = client_->Get("/t/leased");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_FALSE(read->has_value());
}

TEST_F(EtcdClientTest, StoppedEtcdIsUnavailableWithinTheCallTimeout) {
  ASSERT_THAT(etcd_.process().Kill9(), IsOk());
  const absl::Time start = absl::Now();
  absl::Status status = client_->Get("/t/x").status();
  EXPECT_TRUE(absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))
      << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(etcd_.endpoint()));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// The kernel's ephemeral range, where outgoing connections take ports.
std::pair<int, int> EphemeralPorts() {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  file >> low >> high;
  return {low, high};
}

TEST(PickFreePortTest, DrawsBindablePortsOutsideTheEphemeralRange) {
  const auto [low, high] = EphemeralPorts();
  ASSERT_GT(low, 0);
  std::set<int> drawn;
  for (int i = 0; i < 20; ++i) {
    const int port = testing::PickFreePort();
    ASSERT_GT(port, 0);
    EXPECT_TRUE(port < low || port > high) << port;
    drawn.insert(port);
  }
  // Drawn at random, not one port handed out again and again.
  EXPECT_GT(drawn.size(), 10u);
}

TEST(EtcdProcessTest, StartsOnOtherPortsWhenItsPortIsTaken) {
  const int taken = testing::PickFreePort();
  ASSERT_GT(taken, 0);
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(taken));
  ASSERT_EQ(
      ::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  ASSERT_EQ(::listen(holder, 1), 0);
  EtcdProcess etcd(taken);
  EXPECT_THAT(etcd.Start(), IsOk());
  EXPECT_NE(etcd.endpoint(), absl::StrCat("127.0.0.1:", taken));
  ::close(holder);
}

TEST(EtcdClientCreateTest, RefusesBadEndpoints) {
  EXPECT_THAT(EtcdClient::Create(EtcdClientOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EtcdClientOptions options;
  options.endpoints = {"no-port"};
  EXPECT_THAT(
      EtcdClient::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no-port")));
}

}  // namespace
}  // namespace strata
