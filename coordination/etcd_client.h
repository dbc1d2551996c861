#ifndef STRATA_COORDINATION_ETCD_CLIENT_H_
#define STRATA_COORDINATION_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace strata {

struct EtcdClientOptions {
  // host:port of etcd's client URLs; the client moves to the next one when
  // a member does not answer. Required.
  std::vector<std::string> endpoints;
  // The deadline of each call. Default: 2 s.
  absl::Duration call_timeout = absl::Seconds(2);
};

// One key of etcd, with its revisions (etcd's mvccpb.KeyValue).
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// The calls of etcd's v3 gRPC API (KV and Lease) that coordination needs.
// Every call has options.call_timeout as its deadline; etcd's errors come
// back as UNAVAILABLE (not reachable, no leader), DEADLINE_EXCEEDED, or
// the code etcd answered with. Thread-safe.
//
// Example:
//   auto etcd = EtcdClient::Create({.endpoints = {"127.0.0.1:2379"}});
//   auto lease = (*etcd)->GrantLease(absl::Seconds(3));
//   auto won = (*etcd)->CreateIfAbsent("/strata/x/leader", "me", *lease);
class EtcdClient {
 public:
  // INVALID_ARGUMENT when no endpoint is given. Connects lazily.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const EtcdClientOptions& options);
  virtual ~EtcdClient() = default;

  // A new lease of `ttl` (whole seconds, at least 1); returns its id.
  virtual absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) = 0;
  // Renews the lease; returns the TTL it now has. NOT_FOUND once it has
  // expired (or was revoked).
  virtual absl::StatusOr<absl::Duration> KeepAlive(int64_t lease) = 0;
  virtual absl::Status RevokeLease(int64_t lease) = 0;

  // Writes `key` (attached to `lease` unless 0); returns the revision.
  virtual absl::StatusOr<int64_t> Put(absl::string_view key,
                                      absl::string_view value,
                                      int64_t lease = 0) = 0;
  // Writes `key` only if it does not exist, in one transaction. Returns the
  // revision that created it, or nullopt when it existed already.
  virtual absl::StatusOr<std::optional<int64_t>> CreateIfAbsent(
      absl::string_view key, absl::string_view value, int64_t lease) = 0;
  // Writes `key` only if it was last modified at `mod_revision` (a
  // compare-and-swap), in one transaction; returns whether it did.
  virtual absl::StatusOr<bool> PutIfModifiedAt(absl::string_view key,
                                               absl::string_view value,
                                               int64_t mod_revision) = 0;
  // nullopt when the key does not exist.
  virtual absl::StatusOr<std::optional<EtcdKeyValue>> Get(
      absl::string_view key) = 0;
  // Every key that starts with `prefix`, in key order.
  virtual absl::StatusOr<std::vector<EtcdKeyValue>> GetPrefix(
      absl::string_view prefix) = 0;
  // Deletes `key` if its create revision is `create_revision` (so that a
  // process deletes only the key it made); returns whether it did.
  virtual absl::StatusOr<bool> DeleteIfCreatedAt(absl::string_view key,
                                                 int64_t create_revision) = 0;
};

}  // namespace strata

#endif  // STRATA_COORDINATION_ETCD_CLIENT_H_
