#include "server/replication/replication_log.h"

#include <algorithm>
#include <utility>

namespace strata {

ReplicationLog::ReplicationLog(size_t max_bytes) : max_bytes_(max_bytes) {}

void ReplicationLog::Reset(const ReplicationPosition& position) {
  absl::MutexLock lock(&mu_);
  base_ = position;
  entries_.clear();
  bytes_ = 0;
  acks_.clear();
}

void ReplicationLog::StartTerm(uint64_t term) {
  absl::MutexLock lock(&mu_);
  term_ = term;
  acks_.clear();
}

ReplicationPosition ReplicationLog::last() const {
  absl::MutexLock lock(&mu_);
  if (entries_.empty()) return base_;
  return ReplicationPosition{entries_.back()->term(),
                             entries_.back()->sequence()};
}

void ReplicationLog::Append(ReplicationEntryPtr entry) {
  absl::MutexLock lock(&mu_);
  bytes_ += entry->ByteSizeLong();
  entries_.push_back(std::move(entry));
  // Always keep the newest entry, so that a follower one behind continues.
  while (bytes_ > max_bytes_ && entries_.size() > 1) {
    const ReplicationEntryPtr& front = entries_.front();
    bytes_ -= front->ByteSizeLong();
    base_ = ReplicationPosition{front->term(), front->sequence()};
    entries_.pop_front();
  }
}

bool ReplicationLog::CanContinueFrom(
    const ReplicationPosition& position) const {
  absl::MutexLock lock(&mu_);
  if (position == base_) return true;
  if (entries_.empty() || position.sequence <= base_.sequence ||
      position.sequence > entries_.back()->sequence()) {
    return false;
  }
  const size_t index = position.sequence - base_.sequence - 1;
  return entries_[index]->term() == position.term;
}

std::vector<ReplicationEntryPtr> ReplicationLog::ReadAfter(
    uint64_t sequence, size_t max_entries, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto has_next = [this, sequence]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !entries_.empty() && entries_.back()->sequence() > sequence;
  };
  mu_.AwaitWithDeadline(absl::Condition(&has_next), deadline);
  std::vector<ReplicationEntryPtr> out;
  if (!has_next() || sequence < base_.sequence) return out;
  for (size_t i = sequence - base_.sequence;
       i < entries_.size() && out.size() < max_entries; ++i) {
    out.push_back(entries_[i]);
  }
  return out;
}

void ReplicationLog::Acknowledge(const std::string& follower, uint64_t term,
                                 uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (term != term_) return;
  uint64_t& acked = acks_[follower];
  acked = std::max(acked, sequence);
}

int ReplicationLog::CountAcksLocked(uint64_t sequence) const {
  int count = 0;
  for (const auto& [follower, acked] : acks_) {
    if (acked >= sequence) ++count;
  }
  return count;
}

bool ReplicationLog::WaitForAcks(uint64_t term, uint64_t sequence, int count,
                                 absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return term_ != term || CountAcksLocked(sequence) >= count;
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return term_ == term && CountAcksLocked(sequence) >= count;
}

std::map<std::string, uint64_t> ReplicationLog::acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acks_;
}

}  // namespace strata
