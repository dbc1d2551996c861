#ifndef STRATA_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_
#define STRATA_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/collective.h"
#include "worker/collective/rendezvous.h"

namespace strata {

struct GlooCollectiveOptions {
  int rank = 0;
  int world_size = 1;
  // Where the ranks exchange their addresses. Not owned; must outlive
  // CreateGlooCollective (not the collective).
  RendezvousClient* rendezvous = nullptr;
  // Scopes the rendezvous keys, so that jobs (and restarts of one job) that
  // share a shard do not meet each other's ranks. 1 to 128 bytes. Use a new
  // one for every attempt: the shard keeps keys until it restarts, and the
  // ranks of a restart under the same id would read their predecessors'
  // addresses. The world size is part of the keys as well.
  std::string job_id;
  // Host name or address this rank listens on and advertises to its peers;
  // resolved once, to the first of its addresses that this machine can
  // listen on.
  std::string host = "127.0.0.1";
  // How long to wait for every rank to join (the whole rendezvous), and for
  // a peer in each operation. 1 ms to 24 hours.
  absl::Duration timeout = absl::Minutes(5);
};

// Connects the full mesh of ranks over TCP (Gloo). INVALID_ARGUMENT for bad
// options (a host that does not resolve or is not local among them);
// DEADLINE_EXCEEDED when not every rank joined in time, naming the key of
// a missing rank; a rendezvous error (a refused token) as the shard gave it.
//
// Example (every rank of the job, each in its own process):
//   GlooCollectiveOptions options;
//   options.rank = rank;
//   options.world_size = 4;
//   options.rendezvous = rendezvous.get();
//   options.job_id = "ctr-model-attempt-3";
//   options.host = "10.0.0.7";
//   STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Collective> collective,
//                           CreateGlooCollective(options));
//   STRATA_RETURN_IF_ERROR(collective->AllreduceSum(absl::MakeSpan(grads)));
absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(
    const GlooCollectiveOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_
