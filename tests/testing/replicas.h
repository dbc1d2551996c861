#ifndef STRATA_TESTS_TESTING_REPLICAS_H_
#define STRATA_TESTS_TESTING_REPLICAS_H_

#include <memory>
#include <string>
#include <vector>

#include "proto/replication.pb.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace testing {

// The strata-server flags of replica r<replica> of a group of `replicas`
// in `replicated` mode (group durability, 1 s lease) coordinated by the
// etcd at `etcd_endpoint` under `cluster_name`.
std::vector<std::string> ReplicaFlags(const std::string& etcd_endpoint,
                                      int replica, int replicas,
                                      const std::string& cluster_name);

// What the replica at `address` says of itself (Replication.GetPosition,
// 1 s deadline); role "unreachable" when it does not answer.
v1::GetPositionResponse ReplicaPosition(const std::string& address);

// The index of the running replica that says it is primary, or -1.
int PrimaryOf(const std::vector<std::unique_ptr<ServerProcess>>& replicas);
// PrimaryOf, waited for up to 30 s; -1 when none appears.
int WaitForPrimaryOf(
    const std::vector<std::unique_ptr<ServerProcess>>& replicas);
// True once every replica answers with the same position, past sequence 0,
// within 30 s.
bool WaitForReplicasToConverge(
    const std::vector<std::unique_ptr<ServerProcess>>& replicas);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_REPLICAS_H_
