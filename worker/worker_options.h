#ifndef STRATA_WORKER_WORKER_OPTIONS_H_
#define STRATA_WORKER_WORKER_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/collective.h"
#include "worker/collective/rendezvous.h"
#include "worker/training/trainer.h"

namespace strata {

// strata-worker's settings, from its flags (see --help for each).
struct WorkerFlags {
  std::vector<std::string> shards;
  int rank = 0;
  int num_workers = 1;
  std::string rendezvous;  // default: the first shard
  std::string job_id;
  std::string host;
  std::string device;  // "cpu" or "cuda"
  int cuda_device = 0;
  absl::Duration ps_rpc_timeout;
  absl::Duration ps_retry_deadline;
  absl::Duration collective_timeout;
  std::string result_file;
  int metrics_port = -1;  // -1: no metrics server
  bool pull_fp16 = false;
  bool shared_memory_pull = true;
  TrainerOptions trainer;
};

// Reads and checks the flags; INVALID_ARGUMENT naming the flag at fault.
absl::StatusOr<WorkerFlags> WorkerFlagsFromCommandLine();

// The NCCL collective of a GPU rank; FAILED_PRECONDITION in a build
// without CUDA.
absl::StatusOr<std::unique_ptr<Collective>> CreateDeviceCollective(
    const WorkerFlags& flags, RendezvousClient* rendezvous);

// Writes the result as one JSON object (for scripts and benchmarks).
absl::Status WriteResultFile(const std::string& path,
                             const TrainingResult& result);

}  // namespace strata

#endif  // STRATA_WORKER_WORKER_OPTIONS_H_
