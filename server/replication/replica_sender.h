#ifndef STRATA_SERVER_REPLICATION_REPLICA_SENDER_H_
#define STRATA_SERVER_REPLICATION_REPLICA_SENDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/embedding_store.h"
#include "proto/replication.grpc.pb.h"

namespace strata {

class ReplicaGroup;

// On a primary: sends the group's log to one follower, from where the
// follower stands (a snapshot first when the log cannot continue from
// there), and records its acknowledgements in the log. Runs a thread until
// destruction or until its replica is no longer primary of `term`.
class ReplicaSender {
 public:
  ReplicaSender(ReplicaGroup* group, uint64_t term, std::string follower_id,
                std::string address);
  ~ReplicaSender();
  ReplicaSender(const ReplicaSender&) = delete;
  ReplicaSender& operator=(const ReplicaSender&) = delete;

  const std::string& address() const { return address_; }
  uint64_t term() const { return term_; }

 private:
  void Run();
  bool running() const;
  absl::StatusOr<ReplicationPosition> FetchPosition();
  absl::StatusOr<ReplicationPosition> SendSnapshot();
  // Sends entries until an error, a stop, or a follower that asks for a
  // snapshot (*needs_snapshot).
  absl::Status Stream(ReplicationPosition position, bool* needs_snapshot);

  ReplicaGroup* const group_;
  const uint64_t term_;
  const std::string follower_id_;
  const std::string address_;
  std::unique_ptr<v1::Replication::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_REPLICA_SENDER_H_
