#ifndef STRATA_SERVER_REPLICATION_REPLICATION_LOG_H_
#define STRATA_SERVER_REPLICATION_REPLICATION_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "embedding/embedding_store.h"
#include "proto/replication.pb.h"

namespace strata {

using ReplicationEntryPtr = std::shared_ptr<const v1::ReplicationEntry>;

// The recent entries of a replica group's log, in memory up to a byte
// budget, after a base position; and, on the primary, how far each follower
// has acknowledged. A follower keeps the entries it applied too, so that it
// can feed the others once it is promoted. Thread-safe. Waits use the real
// clock (absl::Mutex deadlines).
class ReplicationLog {
 public:
  explicit ReplicationLog(size_t max_bytes);
  ReplicationLog(const ReplicationLog&) = delete;
  ReplicationLog& operator=(const ReplicationLog&) = delete;

  // Forgets every entry and acknowledgement; the log continues after
  // `position`.
  void Reset(const ReplicationPosition& position);
  // Starts counting acknowledgements for `term` (a new primary): earlier
  // ones are forgotten and waiters of another term give up.
  void StartTerm(uint64_t term);

  // The position of the last entry (the base when there is none).
  ReplicationPosition last() const;
  // REQUIRES: entry->sequence() == last().sequence + 1 and its term is at
  // least last().term.
  void Append(ReplicationEntryPtr entry);

  // Whether a follower that stands at `position` can continue from the
  // entries kept: it is the base, or a kept entry with the same term.
  bool CanContinueFrom(const ReplicationPosition& position) const;
  // Up to `max_entries` kept entries after `sequence`, waiting until
  // `deadline` for one. Empty also when entries after it are no longer
  // kept (CanContinueFrom tells).
  std::vector<ReplicationEntryPtr> ReadAfter(uint64_t sequence,
                                             size_t max_entries,
                                             absl::Time deadline) const;

  // Follower `follower` has every entry up to `sequence` of `term`.
  void Acknowledge(const std::string& follower, uint64_t term,
                   uint64_t sequence);
  // Waits until `count` followers have acknowledged `sequence` in `term`;
  // false at `deadline` or when the term changes.
  bool WaitForAcks(uint64_t term, uint64_t sequence, int count,
                   absl::Time deadline) const;
  // Each follower's acknowledged sequence in the current term.
  std::map<std::string, uint64_t> acknowledged() const;

 private:
  int CountAcksLocked(uint64_t sequence) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  ReplicationPosition base_ ABSL_GUARDED_BY(mu_);
  std::deque<ReplicationEntryPtr> entries_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> acks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_REPLICATION_LOG_H_
