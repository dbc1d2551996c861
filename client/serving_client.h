#ifndef STRATA_CLIENT_SERVING_CLIENT_H_
#define STRATA_CLIENT_SERVING_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"

namespace strata {
namespace v1 {
class ServingStatusResponse;
}  // namespace v1

struct ServingClientOptions {
  // host:port of one or more strata-serving replicas. Required.
  std::vector<std::string> endpoints;
  // Deadline of each attempt. Default: 5 s.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // How long a call retries replicas that answer UNAVAILABLE (or
  // RESOURCE_EXHAUSTED). A replica that answered UNAVAILABLE is called next
  // waiting for its connection, within this deadline, so that a replica
  // back up is reached as soon as it listens. Default: 10 s.
  absl::Duration retry_deadline = absl::Seconds(10);
  // Backoff between retries, doubling up to max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(1);
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
  // TLS: when tls_ca_file is set, the replicas are reached over TLS and
  // verified against this PEM CA; the client certificate and key (both or
  // neither) are presented when set. Default: empty (insecure).
  std::string tls_ca_file;
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  // Bearer token sent as "authorization" metadata on every call (needed
  // when the server runs with --auth_reads). Default: empty (none sent).
  std::string auth_token;
  // Ask for the rows as IEEE half floats on the wire: half the bytes (the
  // replicas' and this client's time goes mostly to copying them), about
  // three significant digits; Lookup still writes floats. Default: false.
  bool fp16_values = false;
  // Client-side throttling (common/adaptive_throttle.h): once the replicas
  // refuse calls for overload, up to about this many calls are sent per call
  // they accept and the rest fail here at once with RESOURCE_EXHAUSTED, so
  // that a flood of callers does not spend the servers' time on refusals.
  // 0 turns it off. Default: 2.
  double throttle_k = 2.0;
  // A bound on this client's calls in flight, over all the threads that
  // share it (common/adaptive_concurrency_limit.h): it starts at 16, grows
  // while the replicas answer and shrinks when they refuse for overload; a
  // call beyond it fails here at once with RESOURCE_EXHAUSTED. Under
  // overload the replicas then refuse few calls instead of about as many as
  // they serve (a refusal costs them about half a lookup answered from
  // their row cache). For a client shared by many threads; a call must
  // pass both this and the throttle. Default: false.
  bool adaptive_concurrency_limit = false;
};

// A client of the serving PS (strata-serving). Spreads calls over the
// replicas round-robin, sets a deadline on every call, retries UNAVAILABLE
// and RESOURCE_EXHAUSTED (on the next replica) with backoff, and throttles
// itself while the replicas refuse calls for overload. Thread-safe.
//
// Example:
//   ServingClientOptions options;
//   options.endpoints = {"10.0.0.9:50061", "10.0.0.10:50061"};
//   auto client = ServingClient::Create(options);
//   std::vector<float> rows(keys.size() * 16);
//   absl::Status s = (*client)->Lookup("user", keys, absl::MakeSpan(rows));
class ServingClient {
 public:
  // INVALID_ARGUMENT without endpoints; the error of
  // ChannelCredentialsFromFiles (common/tls.h) for unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<ServingClient>> Create(
      const ServingClientOptions& options);
  virtual ~ServingClient() = default;
  ServingClient(const ServingClient&) = delete;
  ServingClient& operator=(const ServingClient&) = delete;

  // Writes the rows of `keys` in order to `out`, keys.size() * dim floats
  // where dim = out.size() / keys.size(). INVALID_ARGUMENT when `keys` is
  // empty, `out` is not a multiple of it or the table's dimension differs;
  // NOT_FOUND for an unknown table; `num_missing`, when given, receives how
  // many keys had no row (they got the server's default).
  virtual absl::Status Lookup(absl::string_view table,
                              absl::Span<const uint64_t> keys,
                              absl::Span<float> out,
                              uint32_t* num_missing = nullptr) = 0;

  // The serving PS's state: the shards it follows and how fresh it is.
  virtual absl::StatusOr<v1::ServingStatusResponse> Status() = 0;

 protected:
  ServingClient() = default;
};

}  // namespace strata

#endif  // STRATA_CLIENT_SERVING_CLIENT_H_
