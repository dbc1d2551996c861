#ifndef STRATA_TESTS_SERVING_SERVING_TEST_CLUSTER_H_
#define STRATA_TESTS_SERVING_SERVING_TEST_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace testing {

// Where a training shard's change stream stands.
struct StreamPosition {
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
};

// Training shards and a strata-serving that follows them, as child
// processes on loopback, with a PsClient for the training side and a
// ServingClient for the serving side. Start processes from the test's
// thread (see ServerProcess). Not thread-safe, except the clients.
class ServingTestCluster {
 public:
  // `shard_flags` are added to every training shard's command line.
  explicit ServingTestCluster(int num_shards,
                              std::vector<std::string> shard_flags = {});

  // Starts the training shards and makes the PsClient.
  absl::Status StartTraining();
  // Starts strata-serving following every shard (or with `flags` only,
  // when they name --checkpoint_dirs or --shards) and makes the
  // ServingClient.
  absl::Status StartServing(std::vector<std::string> flags = {});

  ServerProcess& shard(int i) { return *shards_[i]; }
  ServerProcess& serving() { return *serving_; }
  PsClient& training() { return *training_; }
  ServingClient& client() { return *client_; }
  std::string ShardList() const;

  // Each shard's incarnation and latest sequence, read from the first
  // batch of a Subscribe (a snapshot's beginning) of our own.
  absl::StatusOr<std::vector<StreamPosition>> TrainingPositions();
  // Waits until serving has applied everything the training shards had
  // when this was called. DEADLINE_EXCEEDED (with the last Status)
  // otherwise.
  absl::StatusOr<v1::ServingStatusResponse> WaitUntilCaughtUp(
      absl::Duration deadline = absl::Seconds(20));
  // Waits until `done(status)` holds for serving's Status.
  absl::StatusOr<v1::ServingStatusResponse> WaitForStatus(
      const std::function<bool(const v1::ServingStatusResponse&)>& done,
      absl::Duration deadline = absl::Seconds(20));

  // Training's rows and serving's rows of `keys`, each keys.size() * dim.
  absl::StatusOr<std::vector<float>> Pull(const std::string& table,
                                          const std::vector<uint64_t>& keys,
                                          uint32_t dim);
  absl::StatusOr<std::vector<float>> Lookup(const std::string& table,
                                            const std::vector<uint64_t>& keys,
                                            uint32_t dim);

 private:
  std::vector<std::unique_ptr<ServerProcess>> shards_;
  std::unique_ptr<ServerProcess> serving_;
  std::unique_ptr<PsClient> training_;
  std::unique_ptr<ServingClient> client_;
};

// A table of dimension `dim` trained by SGD (learning rate 1) from uniform
// initial values.
v1::TableConfig SgdTable(const std::string& name, uint32_t dim);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_SERVING_SERVING_TEST_CLUSTER_H_
