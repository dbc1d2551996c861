#ifndef STRATA_SERVING_SHARD_FOLLOWER_H_
#define STRATA_SERVING_SHARD_FOLLOWER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "serving/serving_store.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class ClientContext;
}  // namespace grpc

namespace strata {
namespace v1 {
class ChangeBatch;
class ReplicaGroupInfo;
}  // namespace v1

// What a follower knows about the shard it follows.
struct FollowState {
  uint32_t shard_index = 0;
  std::string address;
  // A stream is open and the shard has been heard from on it.
  bool connected = false;
  uint64_t incarnation = 0;
  uint64_t applied_sequence = 0;
  // The shard's latest sequence as last heard.
  uint64_t latest_sequence = 0;
  // When the shard was last heard from (a batch or a heartbeat).
  absl::Time last_heard = absl::InfinitePast();
  // How stale the rows may be: 0 when connected and caught up; otherwise
  // seconds since the newest applied update was acknowledged on the shard
  // or since the follower last knew it was caught up, whichever is later.
  double lag_seconds = 0;
  std::string last_error;
  // A replicated shard: the replica the stream is open on (empty while
  // disconnected), how often the follower moved to another replica, and the
  // group's state as its primary last sent it (null until then).
  std::string streaming_from;
  uint64_t replica_switches = 0;
  std::shared_ptr<const v1::ReplicaGroupInfo> replica_group;
  uint64_t snapshots = 0;  // Snapshots received.
  uint64_t resumes = 0;    // Streams resumed from the stored position.
  uint64_t updates = 0;    // Deltas and table creations applied.
  // Freshness: for each applied delta, the time from its acknowledgement on
  // the shard to its rows being visible here, as a histogram with upper
  // bounds kFreshnessBounds (the last bucket has no bound).
  static constexpr std::array<double, 10> kFreshnessBounds = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10};
  std::array<uint64_t, kFreshnessBounds.size() + 1> freshness_buckets{};
  double freshness_sum_seconds = 0;
};

struct ShardFollowerOptions {
  // The shard's index and host:port (a replicated shard's replicas joined
  // by '|'), and the cluster's size (named in errors). Required.
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  std::string address;
  // Tables to follow; empty follows every table.
  std::vector<std::string> tables;
  // The channel to the shard: null is insecure; TLS credentials come from
  // ChannelCredentialsFromFiles (common/tls.h).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Bearer token sent on each Subscribe; empty sends none.
  std::string auth_token;
  // Where the rows go; not owned, must outlive the follower. Required.
  ServingStore* store = nullptr;
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
  // Backoff between failed streams, doubling up to max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // A stream the shard is silent on this long (it sends a heartbeat about
  // every second) is cancelled and opened again. Default: 10 s.
  absl::Duration idle_timeout = absl::Seconds(10);
  // The deadline of each stream; the follower then resumes on a new one.
  // Default: 1 h.
  absl::Duration stream_deadline = absl::Hours(1);
};

// Follows one training shard's change stream (ParameterServer.Subscribe)
// into a ServingStore, in a thread of its own: subscribes from the stored
// position, applies the snapshot or the deltas as they come, and on any
// error retries with backoff until stopped, while the store keeps serving
// what it holds. Never writes to the shard. Thread-safe.
//
// Example:
//   ShardFollowerOptions options;
//   options.address = "10.0.0.7:50051";
//   options.store = store.get();
//   ShardFollower follower(options);
//   follower.Start();
//   ... follower.state().lag_seconds ...
//   follower.Stop();
class ShardFollower {
 public:
  explicit ShardFollower(const ShardFollowerOptions& options);
  ~ShardFollower();
  ShardFollower(const ShardFollower&) = delete;
  ShardFollower& operator=(const ShardFollower&) = delete;

  // REQUIRES: called once.
  void Start();
  // Cancels the stream and joins the threads. Idempotent.
  void Stop();

  FollowState state() const;

 private:
  // One Subscribe stream, until it fails. Returns why it ended, or OK when
  // it reached its deadline.
  absl::Status FollowOnce();
  absl::Status Handle(const v1::ChangeBatch& batch);
  absl::Status HandleUpdate(const v1::ChangeBatch& batch);
  absl::Status EndSnapshot(const v1::ChangeBatch& batch);
  absl::Status CheckIdentity(const v1::ChangeBatch& batch);
  void Run();
  void Watch();
  void SetDisconnected(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // After a failed stream of a replicated shard: the replica a redirect
  // names, else the next one.
  void ChooseReplica(const absl::Status& ended);
  // Streams from replica `replica` from now on, counting the switch.
  void SwitchTo(size_t replica);

  const ShardFollowerOptions options_;
  const absl::flat_hash_set<std::string> followed_;
  // One per replica of the shard (one when it is not replicated); the
  // stream uses replica_'s (runner thread only).
  std::vector<std::string> replica_addresses_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  size_t replica_ = 0;
  absl::Notification stop_;
  std::thread runner_;
  std::thread watchdog_;

  // Stream state, used by the runner thread only.
  bool in_snapshot_ = false;
  uint64_t snapshot_incarnation_ = 0;
  uint64_t snapshot_sequence_ = 0;
  bool stream_started_ = false;
  // Set after an update the store refused: the next stream asks for a
  // snapshot instead of resuming.
  bool force_snapshot_ = false;

  mutable absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  FollowState state_ ABSL_GUARDED_BY(mu_);
  bool snapshotting_ ABSL_GUARDED_BY(mu_) = false;
  // Set by the watchdog when it cancelled a silent stream.
  bool silenced_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stream_opened_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_heard_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time caught_up_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time started_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t acknowledged_micros_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVING_SHARD_FOLLOWER_H_
