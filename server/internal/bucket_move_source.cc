#include "server/internal/bucket_move_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace strata {
namespace server_internal {

void BucketMoveSource::Begin(const std::string& move_id,
                             const BucketSet& buckets, uint32_t target) {
  absl::MutexLock lock(&mu_);
  if (active_.load() && move_id_ == move_id) return;
  if (active_.load()) {
    STRATA_LOG(WARNING, "server")
        << "bucket move " << move_id_ << " replaced by " << move_id;
  }
  move_id_ = move_id;
  buckets_ = std::make_shared<const BucketSet>(buckets);
  target_ = target;
  pending_.clear();
  pending_count_ = 0;
  paused_ = false;
  pause_expired_ = false;
  active_.store(true);
  STRATA_LOG(INFO, "server")
      << "bucket move " << move_id << " of " << buckets.count()
      << " buckets to shard " << target << " began";
}

absl::StatusOr<std::shared_ptr<const BucketSet>> BucketMoveSource::BucketsOf(
    const std::string& move_id) const {
  absl::MutexLock lock(&mu_);
  if (!active_.load() || move_id_ != move_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bucket move '", move_id, "' is not under way on this shard",
        active_.load() ? absl::StrCat(" (move '", move_id_, "' is)") : "",
        ": begin it (again)"));
  }
  return buckets_;
}

bool BucketMoveSource::HoldsMovingKey(
    const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches) const {
  for (const v1::TableBatch& batch : batches) {
    const uint64_t table_hash = HashString(batch.table());
    for (uint64_t key : batch.keys()) {
      if ((*buckets_)[BucketOf(table_hash, key)]) return true;
    }
  }
  return false;
}

void BucketMoveSource::ExpirePauseLocked() {
  if (!paused_ || clock_->Now() - paused_at_ <= max_pause_) return;
  paused_ = false;
  pause_expired_ = true;
  STRATA_LOG(WARNING, "server")
      << "bucket move " << move_id_ << ": writes to its buckets were paused "
      << "longer than " << max_pause_
      << " (--max_move_pause_s) and resume; the move must begin again";
}

absl::Status BucketMoveSource::CheckPush(
    const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches) {
  if (!active_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  ExpirePauseLocked();
  if (!paused_ || !HoldsMovingKey(batches)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "the push holds keys of buckets being moved to shard ", target_,
      " (move '", move_id_, "'), whose writes pause for the move: retry"));
}

void BucketMoveSource::RecordPush(
    const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches) {
  if (!active_.load()) return;
  absl::MutexLock lock(&mu_);
  for (const v1::TableBatch& batch : batches) {
    const uint64_t table_hash = HashString(batch.table());
    absl::flat_hash_set<uint64_t>* keys = nullptr;
    for (uint64_t key : batch.keys()) {
      if (!(*buckets_)[BucketOf(table_hash, key)]) continue;
      if (keys == nullptr) keys = &pending_[batch.table()];
      if (keys->insert(key).second) ++pending_count_;
    }
  }
}

absl::Status BucketMoveSource::Pause(const std::string& move_id) {
  absl::MutexLock lock(&mu_);
  if (!active_.load() || move_id_ != move_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("bucket move '", move_id,
                     "' is not under way on this shard: begin it (again)"));
  }
  ExpirePauseLocked();
  if (pause_expired_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the write pause of bucket move '", move_id,
                     "' ran out (--max_move_pause_s): begin the move again"));
  }
  if (!paused_) {
    paused_ = true;
    paused_at_ = clock_->Now();
  }
  return absl::OkStatus();
}

std::vector<PendingKeys> BucketMoveSource::TakePending(size_t max_keys,
                                                       uint64_t* left) {
  absl::MutexLock lock(&mu_);
  std::vector<PendingKeys> taken;
  size_t count = 0;
  for (auto it = pending_.begin(); it != pending_.end() && count < max_keys;) {
    PendingKeys& out = taken.emplace_back();
    out.table = it->first;
    absl::flat_hash_set<uint64_t>& keys = it->second;
    while (!keys.empty() && count < max_keys) {
      auto key = keys.begin();
      out.keys.push_back(*key);
      keys.erase(key);
      ++count;
    }
    std::sort(out.keys.begin(), out.keys.end());
    if (keys.empty()) {
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  pending_count_ -= count;
  *left = pending_count_;
  return taken;
}

void BucketMoveSource::Requeue(const PendingKeys& keys) {
  absl::MutexLock lock(&mu_);
  if (!active_.load()) return;
  absl::flat_hash_set<uint64_t>& pending = pending_[keys.table];
  for (uint64_t key : keys.keys) {
    if (pending.insert(key).second) ++pending_count_;
  }
}

absl::Status BucketMoveSource::CheckGiveAway(const ShardMap& current,
                                             const ShardMap& next,
                                             uint32_t self) {
  if (!active_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  ExpirePauseLocked();
  for (uint32_t bucket = 0; bucket < kNumBuckets; ++bucket) {
    if (!(*buckets_)[bucket] || current.OwnerOf(bucket) != self ||
        next.OwnerOf(bucket) == self) {
      continue;
    }
    if (!paused_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the map gives away bucket ", bucket, " of move '", move_id_,
          "', whose writes are not paused",
          pause_expired_ ? " (the pause ran out: begin the move again)" : "",
          ": its last updates would be lost"));
    }
    if (pending_count_ > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the map gives away bucket ", bucket, " of move '",
                       move_id_, "' while ", pending_count_,
                       " updated keys of its buckets were not caught up"));
    }
  }
  return absl::OkStatus();
}

absl::Duration BucketMoveSource::End(const std::string& move_id) {
  absl::MutexLock lock(&mu_);
  if (!active_.load() || move_id_ != move_id) return absl::ZeroDuration();
  const absl::Duration paused =
      paused_ ? clock_->Now() - paused_at_ : absl::ZeroDuration();
  active_.store(false);
  paused_ = false;
  pending_.clear();
  pending_count_ = 0;
  STRATA_LOG(INFO, "server")
      << "bucket move " << move_id << " ended; writes to its buckets were "
      << "paused for " << paused;
  return paused;
}

}  // namespace server_internal
}  // namespace strata
