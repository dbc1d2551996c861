#ifndef STRATA_WORKER_COLLECTIVE_RENDEZVOUS_H_
#define STRATA_WORKER_COLLECTIVE_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace strata {

// A key-value store the ranks of a job meet through before they connect to
// each other (Gloo's TCP addresses, NCCL's unique id). Served by a training
// shard (the Rendezvous service of strata.v1), so a cluster needs no shared
// file system. Keys are scoped by the caller (job id prefix). Thread-safe.
class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;

  // Stores value under key, replacing an earlier value.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // The value under key, waiting for it to be set until `timeout` has passed
  // (DEADLINE_EXCEEDED naming the key).
  //
  // CreateGrpcRendezvousClient's Get polls the shard, 5 ms apart at first
  // and up to 200 ms apart, and also waits out a shard that is not up yet
  // (UNAVAILABLE); other errors (a refused token) return at once. A zero
  // timeout asks once.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;
};

struct RendezvousClientOptions {
  // host:port of the training shard that serves the rendezvous.
  std::string address;
  // Deadline of each call; Get polls until its own timeout.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // TLS and bearer token, as for PsClient (empty: insecure / none).
  std::string tls_ca_file;
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  std::string auth_token;
  // Times the polls of Get and sleeps between them. Default: Clock::Real().
  Clock* clock = Clock::Real();
};

// A client of the Rendezvous service of the shard at options.address. Every
// call carries a deadline (rpc_timeout, or less when Get's own timeout ends
// first) and waits for the connection to the shard to be ready within it;
// errors name the shard. INVALID_ARGUMENT for an empty address; errors of
// ChannelCredentialsFromFiles for unreadable TLS files.
//
// Example:
//   RendezvousClientOptions options;
//   options.address = "ps-0.strata:50051";
//   STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousClient> client,
//                           CreateGrpcRendezvousClient(options));
//   STRATA_RETURN_IF_ERROR(client->Set("job-7/addr/0", my_address));
//   STRATA_ASSIGN_OR_RETURN(std::string peer,
//                           client->Get("job-7/addr/1", absl::Minutes(1)));

absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const RendezvousClientOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_COLLECTIVE_RENDEZVOUS_H_
