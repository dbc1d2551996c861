#ifndef STRATA_WORKER_COLLECTIVE_COLLECTIVE_H_
#define STRATA_WORKER_COLLECTIVE_COLLECTIVE_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata {

// Collective operations among the ranks of one training job: the dense
// gradients are summed across ranks every step. Implementations: a single
// rank (no communication), Gloo over TCP (CPU ranks), NCCL (GPU ranks).
// Every rank must make the same calls in the same order with the same
// sizes. Not thread-safe: one thread per rank calls it.
class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "local", "gloo" or "nccl".
  virtual const char* backend() const = 0;

  // data := elementwise sum of every rank's data. DEADLINE_EXCEEDED when a
  // peer does not take part in time, UNAVAILABLE when the connection to one
  // breaks; afterwards the collective is unusable.
  virtual absl::Status AllreduceSum(absl::Span<float> data) = 0;
  // data := root's data on every rank.
  virtual absl::Status Broadcast(absl::Span<float> data, int root) = 0;
  // Returns once every rank has called Barrier.
  virtual absl::Status Barrier() = 0;
};

// A job of one rank: the operations return their input.
std::unique_ptr<Collective> CreateLocalCollective();

}  // namespace strata

#endif  // STRATA_WORKER_COLLECTIVE_COLLECTIVE_H_
