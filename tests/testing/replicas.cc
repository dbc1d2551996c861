#include "tests/testing/replicas.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace testing {

std::vector<std::string> ReplicaFlags(const std::string& etcd_endpoint,
                                      int replica, int replicas,
                                      const std::string& cluster_name) {
  return {
      absl::StrCat("--etcd_endpoints=", etcd_endpoint),
      absl::StrCat("--replica_id=r", replica),
      absl::StrCat("--replicas=", replicas),
      "--replication=replicated",
      "--durability=group",
      "--lease_ttl_ms=1000",
      absl::StrCat("--cluster_name=", cluster_name),
  };
}

v1::GetPositionResponse ReplicaPosition(const std::string& address) {
  auto stub = v1::Replication::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(1));
  v1::GetPositionResponse answer;
  if (!stub->GetPosition(&context, v1::GetPositionRequest(), &answer).ok()) {
    answer.set_role("unreachable");
  }
  return answer;
}

int PrimaryOf(const std::vector<std::unique_ptr<ServerProcess>>& replicas) {
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (replicas[r]->running() &&
        ReplicaPosition(replicas[r]->address()).role() == "primary") {
      return static_cast<int>(r);
    }
  }
  return -1;
}

int WaitForPrimaryOf(
    const std::vector<std::unique_ptr<ServerProcess>>& replicas) {
  int primary = -1;
  WaitUntil([&] { return (primary = PrimaryOf(replicas)) >= 0; },
            absl::Seconds(30), absl::Milliseconds(50));
  return primary;
}

bool WaitForReplicasToConverge(
    const std::vector<std::unique_ptr<ServerProcess>>& replicas) {
  return WaitUntil(
      [&] {
        const v1::GetPositionResponse first =
            ReplicaPosition(replicas[0]->address());
        for (const auto& replica : replicas) {
          const v1::GetPositionResponse other =
              ReplicaPosition(replica->address());
          if (other.position().sequence() != first.position().sequence() ||
              other.position().term() != first.position().term()) {
            return false;
          }
        }
        return first.position().sequence() > 0;
      },
      absl::Seconds(30), absl::Milliseconds(50));
}

}  // namespace testing
}  // namespace strata
