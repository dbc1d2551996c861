#ifndef STRATA_SERVER_INTERNAL_SUBSCRIPTION_H_
#define STRATA_SERVER_INTERNAL_SUBSCRIPTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shard_map.h"
#include "embedding/embedding_store.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {

struct SubscriptionOptions {
  EmbeddingStore* store = nullptr;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  // Records sent per DELTA read from the log.
  size_t max_records_per_read = 64;
  // An idle stream sends a HEARTBEAT this often.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A follower that takes no batch for this long is cut off.
  absl::Duration stall_timeout = absl::Seconds(60);
  // Decremented when the stream ends (the shard's count of open streams);
  // may be null.
  std::shared_ptr<std::atomic<int>> open_streams;
  // A replicated shard: fills in the replica group's state, which a batch
  // carries about once per heartbeat_interval. Null when not replicated.
  std::function<void(v1::ReplicaGroupInfo*)> describe_replica_group;
  // The shard map now, asked at the start of each snapshot: a snapshot
  // leaves out the rows of buckets it gives to other shards than
  // shard_index, such as a bucket move's copy that the target does not own
  // yet (its values are older than the source's stream). Null sends every
  // row.
  std::function<std::shared_ptr<const ShardMap>()> shard_map;
};

// One follower's change stream (ParameterServer.Subscribe): a snapshot when
// needed, then the change log's records in order. A producer thread builds
// the batches and hands them to gRPC one at a time: a slow follower holds
// back only its own thread, and once it falls behind what the log keeps it
// gets a new snapshot instead of a growing queue.
//
// Owns itself: deleted by gRPC's OnDone.
class Subscription final : public grpc::ServerWriteReactor<v1::ChangeBatch> {
 public:
  // `context` (not owned) is the call's; it outlives the reactor's OnDone.
  Subscription(const SubscriptionOptions& options,
               grpc::CallbackServerContext* context,
               const v1::SubscribeRequest& request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Produce();
  // Sends a snapshot; returns the sequence it is consistent with.
  absl::Status SendSnapshot(uint64_t* sequence);
  // Sends what the log holds after `*sequence` and advances it.
  absl::Status SendDeltas(uint64_t* sequence);
  // Whether the follower asked for `table` (or for every table).
  bool Follows(const std::string& table) const;
  v1::ChangeBatch NewBatch(v1::ChangeBatch::Kind kind, uint64_t sequence);
  // True when the log moved past `sequence` (or the stream was cancelled),
  // false when a heartbeat is due.
  bool WaitForChangeOrCancel(uint64_t sequence);
  // Blocks until gRPC took the batch; false when the stream is over.
  bool Send(v1::ChangeBatch batch);
  bool cancelled();

  const SubscriptionOptions options_;
  grpc::CallbackServerContext* const context_;
  const v1::SubscribeRequest request_;
  uint64_t incarnation_ = 0;
  // When the next batch carries the replica group's state (producer only).
  absl::Time next_group_info_ = absl::InfinitePast();

  absl::Mutex mu_;
  v1::ChangeBatch in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread producer_;
};

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_SUBSCRIPTION_H_
