#ifndef STRATA_EMBEDDING_INTERNAL_PUSH_DEDUPLICATOR_H_
#define STRATA_EMBEDDING_INTERNAL_PUSH_DEDUPLICATOR_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"

namespace strata {
namespace embedding_internal {

// Remembers which (client id, sequence) pushes were applied, so that a
// retried push is acknowledged without being applied twice.
//
// Per client it keeps a window of the last kWindow applied sequences above a
// floor; every sequence at or below the floor counts as applied. Pushes of one
// client may arrive out of order as long as fewer than kWindow are in flight.
// The floor moves over every sequence applied without a gap, so a client that
// numbers its pushes 1, 2, 3... costs a floor and its in-flight sequences.
// Windows of clients idle for a while, and the least recently used past a
// count, are forgotten by Expire: a retry that old is applied again.
// Thread-safe.
class PushDeduplicator {
 public:
  static constexpr size_t kWindow = 1024;

  // `clock` (not owned) stamps each window's last use.
  explicit PushDeduplicator(Clock* clock = Clock::Real()) : clock_(clock) {}

  // Returns false if (client, sequence) was applied before; otherwise records
  // it as applied and returns true.
  bool Claim(const std::string& client_id, uint64_t sequence);
  // Whether (client, sequence) was applied (Claim would return false);
  // changes nothing.
  bool Applied(const std::string& client_id, uint64_t sequence);
  // The serialized window of `client_id` as it will be once `sequence` is
  // claimed, to write next to the push's rows before anything is claimed
  // (sync and group durability); changes nothing.
  std::string SerializeWindowWith(const std::string& client_id,
                                  uint64_t sequence);
  // Claim, for a push whose window is on disk already: it is not returned
  // by TakeChangedWindows.
  void ClaimPersisted(const std::string& client_id, uint64_t sequence);
  // Makes TakeChangedWindows return these clients' windows again: writing
  // what it returned failed.
  void MarkChanged(absl::Span<const std::string> client_ids);

  // Serialized windows of the clients claimed since the last call, to be
  // persisted next to the rows they changed.
  std::vector<std::pair<std::string, std::string>> TakeChangedWindows();
  // The serialized window of one client.
  std::string SerializeWindow(const std::string& client_id);

  // Loads a window written by SerializeWindow/TakeChangedWindows.
  absl::Status LoadWindow(const std::string& client_id,
                          absl::string_view serialized);
  void Clear();

  // Forgets the windows unused for `ttl` or more, then the least recently
  // used while more than `max_windows` remain; returns their client ids
  // (whose stored windows the caller deletes).
  std::vector<std::string> Expire(absl::Duration ttl, size_t max_windows);
  size_t size();

 private:
  struct Window {
    uint64_t floor = 0;
    std::set<uint64_t> applied;
    absl::Time last_used;
  };
  static std::string Serialize(const Window& window);
  // Records `sequence` in `window`; false when it was there (or below the
  // floor).
  static bool Insert(Window& window, uint64_t sequence);
  // Insert into the window of `client_id`, used at `now`.
  bool ClaimLocked(const std::string& client_id, uint64_t sequence,
                   absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> changed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_PUSH_DEDUPLICATOR_H_
