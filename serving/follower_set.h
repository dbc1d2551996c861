#ifndef STRATA_SERVING_FOLLOWER_SET_H_
#define STRATA_SERVING_FOLLOWER_SET_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rate_history.h"
#include "serving/shard_follower.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace strata {
namespace v1 {
class ShardMap;
}  // namespace v1

struct FollowerSetOptions {
  // What every follower shares (tables, credentials, token, store, clock);
  // shard_index, num_shards and address are set per shard.
  ShardFollowerOptions follower;
  // How often the training shards' shard map is read to see whether the
  // cluster grew or shrank. Zero never reads it.
  absl::Duration map_check_interval = absl::Seconds(2);
  // A shard the map no longer has is followed until its stream caught up,
  // or this long at most (it may be stopped already).
  absl::Duration retire_deadline = absl::Seconds(30);
};

// The followers of a training cluster, one per shard of its current shard
// map. The cluster starts with the shards it is given; when `stratactl
// reshard` grows or shrinks it, the map names the new shards' addresses:
// the set follows the shards the map adds and stops following those it
// removed, once their streams caught up. Thread-safe.
class FollowerSet {
 public:
  FollowerSet(const FollowerSetOptions& options,
              const std::vector<std::string>& addresses);
  ~FollowerSet();
  FollowerSet(const FollowerSet&) = delete;
  FollowerSet& operator=(const FollowerSet&) = delete;

  // Starts the followers and the map checks. REQUIRES: called once.
  void Start();
  // Stops the map checks and every follower. Idempotent.
  void Stop();

  // The followed shards, in shard order, then those being retired.
  std::vector<FollowState> states() const;

  // Reads the shard map from the followed shards (the newest answer wins)
  // and follows its shards. Done every map_check_interval after Start.
  absl::Status CheckShardMap();

 private:
  absl::StatusOr<v1::ShardMap> NewestMap();
  std::unique_ptr<ShardFollower> MakeFollower(uint32_t index, uint32_t count,
                                              const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Follow(const v1::ShardMap& map) ABSL_LOCKS_EXCLUDED(mu_);
  void RetireCaughtUp() ABSL_LOCKS_EXCLUDED(mu_);

  const FollowerSetOptions options_;
  std::optional<PeriodicTask> checker_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<ShardFollower>> followers_ ABSL_GUARDED_BY(mu_);
  struct Retiring {
    std::unique_ptr<ShardFollower> follower;
    absl::Time since;
  };
  std::vector<Retiring> retiring_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // The newest map acted on: an older answer (a shard that has not got the
  // newest map yet) changes nothing.
  uint64_t applied_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Why the last map check failed (logged when it changes); empty after one
  // succeeded.
  std::string check_error_ ABSL_GUARDED_BY(mu_);
  // Channels for the map checks, by replica address.
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
  // Set while the map has another shard count than the followed shards and
  // names no addresses (the --shards list is short or long): logged once
  // per map version, and shown as every shard's last_error.
  std::string count_error_ ABSL_GUARDED_BY(mu_);
  uint64_t reported_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVING_FOLLOWER_SET_H_
