#ifndef STRATA_TESTS_TESTING_ETCD_PROCESS_H_
#define STRATA_TESTS_TESTING_ETCD_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace testing {

// A free TCP port on 127.0.0.1 at the time of the call (bound, then
// released), drawn at random below the kernel's ephemeral range so that no
// outgoing connection takes it before the program it is meant for binds
// it. 0 when none could be bound.
int PickFreePort();

// A one-member etcd (Debian's /usr/bin/etcd, or $STRATA_ETCD) for tests,
// on free loopback ports, its data in a temporary directory, with short
// election timings so that leases down to 1 s are honoured. Killed with the
// test. Not thread-safe.
class EtcdProcess {
 public:
  // A nonzero `first_client_port` is tried first (tests of the retry).
  explicit EtcdProcess(int first_client_port = 0);
  // Starts etcd and waits until it answers a read, on fresh ports again
  // (up to three times) when one was taken before etcd bound it. INTERNAL
  // when it cannot be started or exits; UNAVAILABLE when its ports were
  // taken every time; DEADLINE_EXCEEDED (with its log) when it does not
  // answer.
  absl::Status Start();
  // "127.0.0.1:<client port>".
  std::string endpoint() const;
  ServerProcess& process() { return *process_; }

 private:
  // One attempt, with its own data directory.
  absl::Status StartOnFreshPorts(const std::string& data_dir);

  TempDir dir_;
  int first_client_port_ = 0;
  int client_port_ = 0;
  std::unique_ptr<ServerProcess> process_;
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_ETCD_PROCESS_H_
