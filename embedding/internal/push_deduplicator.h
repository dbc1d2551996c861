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

namespace strata {
namespace embedding_internal {

// Remembers which (client id, sequence) pushes were applied, so that a
// retried push is acknowledged without being applied twice.
//
// Per client it keeps a window of the last kWindow applied sequences above a
// floor; every sequence at or below the floor counts as applied. Pushes of one
// client may arrive out of order as long as fewer than kWindow are in flight.
// Thread-safe.
class PushDeduplicator {
 public:
  static constexpr size_t kWindow = 1024;

  // Returns false if (client, sequence) was applied before; otherwise records
  // it as applied and returns true.
  bool Claim(const std::string& client_id, uint64_t sequence);

  // Serialized windows of the clients claimed since the last call, to be
  // persisted next to the rows they changed.
  std::vector<std::pair<std::string, std::string>> TakeChangedWindows();
  // The serialized window of one client.
  std::string SerializeWindow(const std::string& client_id);

  // Loads a window written by SerializeWindow/TakeChangedWindows.
  absl::Status LoadWindow(const std::string& client_id,
                          absl::string_view serialized);
  void Clear();

 private:
  struct Window {
    uint64_t floor = 0;
    std::set<uint64_t> applied;
  };
  static std::string Serialize(const Window& window);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> changed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_PUSH_DEDUPLICATOR_H_
