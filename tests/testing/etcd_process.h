#ifndef STRATA_TESTS_TESTING_ETCD_PROCESS_H_
#define STRATA_TESTS_TESTING_ETCD_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace testing {

// A free TCP port on 127.0.0.1 at the time of the call (bound, then
// released). 0 when none could be bound.
int PickFreePort();

// A one-member etcd (Debian's /usr/bin/etcd, or $STRATA_ETCD) for tests,
// on free loopback ports, its data in a temporary directory, with short
// election timings so that leases down to 1 s are honoured. Killed with the
// test. Not thread-safe.
class EtcdProcess {
 public:
  EtcdProcess();
  // Starts etcd and waits until it answers a read. INTERNAL when it cannot
  // be started; DEADLINE_EXCEEDED (with its log) when it does not answer.
  absl::Status Start();
  // "127.0.0.1:<client port>".
  std::string endpoint() const;
  ServerProcess& process() { return *process_; }

 private:
  TempDir dir_;
  int client_port_ = 0;
  std::unique_ptr<ServerProcess> process_;
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_ETCD_PROCESS_H_
