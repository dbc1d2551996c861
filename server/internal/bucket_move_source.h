#ifndef STRATA_SERVER_INTERNAL_BUCKET_MOVE_SOURCE_H_
#define STRATA_SERVER_INTERNAL_BUCKET_MOVE_SOURCE_H_

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/shard_map.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {

using BucketSet = std::bitset<kNumBuckets>;

// The keys of one table a catch-up reads again.
struct PendingKeys {
  std::string table;
  std::vector<uint64_t> keys;
};

// What the shard a move takes buckets from knows of it: the buckets, the
// keys pushed to them since the move began (read again by CATCH_UP, so that
// the target ends with every update), and the pause of writes to them that
// lets the last catch-up be the last. One move at a time. Thread-safe.
//
// The shard calls Begin and Pause while no push is between its routing
// check and its apply (under its push gate), and CheckPush/RecordPush in
// that window, so that no push escapes both the copy and the tracking.
class BucketMoveSource {
 public:
  // `clock` (not owned) times the pause; a pause longer than `max_pause`
  // ends by itself (a driver that died must not leave buckets unwritable),
  // and the move can then no longer give its buckets away.
  BucketMoveSource(Clock* clock, absl::Duration max_pause)
      : clock_(clock), max_pause_(max_pause) {}
  BucketMoveSource(const BucketMoveSource&) = delete;
  BucketMoveSource& operator=(const BucketMoveSource&) = delete;

  // Starts move `move_id` of `buckets` to shard `target`, replacing any
  // other. The same id again keeps the move as it is.
  void Begin(const std::string& move_id, const BucketSet& buckets,
             uint32_t target);
  // The buckets of move `move_id`; FAILED_PRECONDITION when it is not the
  // current move.
  absl::StatusOr<std::shared_ptr<const BucketSet>> BucketsOf(
      const std::string& move_id) const;
  // UNAVAILABLE (retry) when writes to the move's buckets are paused and
  // `batches` holds a key of one.
  absl::Status CheckPush(
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches);
  // Remembers the keys of `batches` in the move's buckets.
  void RecordPush(
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches);
  // Pauses writes to the buckets (FAILED_PRECONDITION when `move_id` is
  // not the current move, or its pause already ran out).
  absl::Status Pause(const std::string& move_id);
  // Takes up to `max_keys` of the remembered keys; *left: how many remain.
  std::vector<PendingKeys> TakePending(size_t max_keys, uint64_t* left);
  // Gives back keys TakePending took, whose rows did not reach the target.
  void Requeue(const PendingKeys& keys);
  // OK unless replacing `current` by `next` takes from shard `self` a
  // bucket of the move before its writes are paused and every key pushed
  // to it was taken.
  absl::Status CheckGiveAway(const ShardMap& current, const ShardMap& next,
                             uint32_t self);
  // Ends move `move_id` (no-op for another id): writes resume. Returns how
  // long they were paused.
  absl::Duration End(const std::string& move_id);

 private:
  // Ends a pause past max_pause_.
  void ExpirePauseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HoldsMovingKey(
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration max_pause_;
  // Whether a move is under way: pushes skip the lock when none is.
  std::atomic<bool> active_{false};
  mutable absl::Mutex mu_;
  std::string move_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const BucketSet> buckets_ ABSL_GUARDED_BY(mu_);
  uint32_t target_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, absl::flat_hash_set<uint64_t>> pending_
      ABSL_GUARDED_BY(mu_);
  uint64_t pending_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  // The pause ran out: the move cannot give its buckets away any more.
  bool pause_expired_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time paused_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_BUCKET_MOVE_SOURCE_H_
