#ifndef STRATA_SERVER_INTERNAL_RENDEZVOUS_STORE_H_
#define STRATA_SERVER_INTERNAL_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace server_internal {

struct RendezvousStoreLimits {
  // Longest key, in bytes; keys are never empty. Default: 256.
  size_t max_key_bytes = 256;
  // Longest value, in bytes. Default: 1 MiB.
  size_t max_value_bytes = size_t{1} << 20;
  // Number of keys held. Default: 100,000.
  size_t max_keys = 100000;
  // Bytes of keys and values held together, so that many large values
  // cannot take the shard's memory. Default: 256 MiB.
  size_t max_total_bytes = size_t{256} << 20;
};

// The keys and values of the Rendezvous service, in memory and bounded by
// RendezvousStoreLimits. Nothing expires: a value stays until it is
// replaced or the process ends. Thread-safe.
//
// Example:
//   RendezvousStore store(RendezvousStoreLimits{});
//   absl::Status s = store.Set("job-7/0", address_bytes);
//   absl::StatusOr<std::string> v = store.Get("job-7/0");
class RendezvousStore {
 public:
  explicit RendezvousStore(const RendezvousStoreLimits& limits);
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // Stores `value` under `key`, replacing an earlier value. INVALID_ARGUMENT
  // naming the limit for an empty or too long key or a too long value;
  // RESOURCE_EXHAUSTED when a new key would pass max_keys, or the bytes held
  // would pass max_total_bytes.
  absl::Status Set(absl::string_view key, absl::string_view value);
  // The value under `key`; NOT_FOUND naming the key when none was set,
  // INVALID_ARGUMENT for a key Set would refuse.
  absl::StatusOr<std::string> Get(absl::string_view key) const;

  size_t num_keys() const;
  // Bytes of keys and values held.
  size_t total_bytes() const;

 private:
  absl::Status CheckKey(absl::string_view key) const;

  const RendezvousStoreLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_RENDEZVOUS_STORE_H_
