#ifndef STRATA_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_
#define STRATA_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/collective.h"
#include "worker/collective/rendezvous.h"

namespace strata {

class Clock;

struct NcclCollectiveOptions {
  int rank = 0;
  int world_size = 1;
  // The CUDA device of this rank; NCCL wants one rank per device.
  int device = 0;
  // Where rank 0 publishes the NCCL unique id (key job_id + "/nccl_id") and
  // the other ranks fetch it. Not owned; must outlive CreateNcclCollective
  // (not the collective). Required when world_size > 1.
  RendezvousClient* rendezvous = nullptr;
  // Scopes the rendezvous key, as for Gloo; required when world_size > 1.
  std::string job_id;
  // How long to wait for every rank to join, and for the peers in each
  // operation.
  absl::Duration timeout = absl::Minutes(5);
  // Times the waits. Default: Clock::Real().
  Clock* clock = nullptr;
};

// A Collective over NCCL for GPU ranks. The operations take host spans: the
// data is copied to a device buffer, reduced or broadcast there by NCCL on
// the rank's own stream, and copied back. The communicator is non-blocking,
// so every wait is bounded by `timeout`: a missing peer gives
// DEADLINE_EXCEEDED, a failed one (NCCL system or remote error)
// UNAVAILABLE; either way the communicator is aborted and the collective is
// unusable afterwards.
//
// CreateNcclCollective: INVALID_ARGUMENT for bad options or a device that
// does not exist, FAILED_PRECONDITION when the machine has no usable GPU,
// DEADLINE_EXCEEDED when the unique id or a rank did not arrive in time.
// Built only with STRATA_CUDA and NCCL (library strata_collective_nccl).
//
//   NcclCollectiveOptions options;
//   options.rank = rank;
//   options.world_size = world_size;
//   options.device = local_rank;
//   options.rendezvous = rendezvous.get();
//   options.job_id = job_id;
//   STRATA_ASSIGN_OR_RETURN(auto collective, CreateNcclCollective(options));
//   STRATA_RETURN_IF_ERROR(collective->AllreduceSum(absl::MakeSpan(grads)));
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const NcclCollectiveOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_
