#include "worker/collective/nccl_collective.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// How often a wait looks at the stream and the communicator. A wait never
// blocks inside CUDA or NCCL, so that a missing peer becomes a timeout.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);

// UNAVAILABLE when a peer or the network failed, INVALID_ARGUMENT for a
// misuse NCCL detected (such as two ranks on one GPU), INTERNAL otherwise.
absl::Status NcclStatus(ncclResult_t result, absl::string_view call) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(call, ": ", ncclGetErrorString(result));
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && *detail != '\0') {
    absl::StrAppend(&message, " (", detail, ")");
  }
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

// Rank 0 makes the id and publishes it as hex (the rendezvous stores text);
// the other ranks wait for it.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(
    const NcclCollectiveOptions& options) {
  const std::string key = absl::StrCat(options.job_id, "/nccl_id");
  ncclUniqueId id;
  if (options.rank == 0) {
    STRATA_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    if (options.rendezvous != nullptr) {
      STRATA_RETURN_IF_ERROR(
          options.rendezvous->Set(key, absl::BytesToHexString(absl::string_view(
                                           id.internal, sizeof(id.internal)))));
    }
    return id;
  }
  STRATA_ASSIGN_OR_RETURN(const std::string hex,
                          options.rendezvous->Get(key, options.timeout));
  bool valid = hex.size() == 2 * sizeof(id.internal);
  for (char c : hex) valid = valid && absl::ascii_isxdigit(c);
  if (!valid) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous key ", key, " holds ", hex.size(),
                     " characters that are not an NCCL unique id (want ",
                     2 * sizeof(id.internal), " hex digits)"));
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(const NcclCollectiveOptions& options, Clock* clock)
      : rank_(options.rank),
        world_size_(options.world_size),
        device_(options.device),
        timeout_(options.timeout),
        clock_(clock) {}

  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  ~NcclCollective() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      // Leaves the communicator cleanly when the peers do too; aborts it
      // (in WaitForCommunicator) when that takes longer than the timeout.
      const ncclResult_t result = ncclCommFinalize(comm_);
      if (result == ncclInProgress) {
        WaitForCommunicator("ncclCommFinalize", clock_->Now() + timeout_)
            .IgnoreError();
      } else if (result != ncclSuccess) {
        Fail(NcclStatus(result, "ncclCommFinalize")).IgnoreError();
      }
      if (comm_ != nullptr) ncclCommDestroy(comm_);
    }
    if (buffer_ != nullptr) cudaFree(buffer_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Creates the stream and joins the communicator of `id`.
  absl::Status Init(const ncclUniqueId& id) {
    const absl::Time deadline = clock_->Now() + timeout_;
    STRATA_RETURN_IF_ERROR(CheckCuda(cudaSetDevice(device_), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(
        CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t result =
        ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      return Fail(NcclStatus(result, "ncclCommInitRankConfig"));
    }
    return WaitForCommunicator("ncclCommInitRankConfig", deadline);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend() const override { return "nccl"; }

  absl::Status AllreduceSum(absl::Span<float> data) override {
    return Run(data, kAllreduce);
  }

  absl::Status Broadcast(absl::Span<float> data, int root) override {
    if (root < 0 || root >= world_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast root ", root, " is not a rank of ", world_size_));
    }
    return Run(data, root);
  }

  absl::Status Barrier() override {
    float token = 0.0f;
    return Run(absl::MakeSpan(&token, 1), kAllreduce);
  }

 private:
  static constexpr int kAllreduce = -1;

  // Allreduce (root == kAllreduce) or broadcast from root, through the
  // device buffer.
  absl::Status Run(absl::Span<float> data, int root) {
    if (!broken_.ok()) return broken_;
    if (data.empty()) return absl::OkStatus();
    const absl::Time deadline = clock_->Now() + timeout_;
    const size_t bytes = data.size() * sizeof(float);
    STRATA_RETURN_IF_ERROR(CheckCuda(cudaSetDevice(device_), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(Reserve(data.size()));
    if (root == kAllreduce || root == rank_) {
      STRATA_RETURN_IF_ERROR(
          CheckCuda(cudaMemcpyAsync(buffer_, data.data(), bytes,
                                    cudaMemcpyHostToDevice, stream_),
                    "cudaMemcpyAsync to the device"));
    }
    const char* what = root == kAllreduce ? "ncclAllReduce" : "ncclBroadcast";
    const ncclResult_t result =
        root == kAllreduce ? ncclAllReduce(buffer_, buffer_, data.size(),
                                           ncclFloat, ncclSum, comm_, stream_)
                           : ncclBroadcast(buffer_, buffer_, data.size(),
                                           ncclFloat, root, comm_, stream_);
    if (result == ncclInProgress) {
      STRATA_RETURN_IF_ERROR(WaitForCommunicator(what, deadline));
    } else if (result != ncclSuccess) {
      return Fail(NcclStatus(result, what));
    }
    // Only once the operation is done: a copy to pageable host memory would
    // block inside CUDA, beyond the reach of the timeout.
    STRATA_RETURN_IF_ERROR(WaitForStream(what, deadline));
    STRATA_RETURN_IF_ERROR(
        CheckCuda(cudaMemcpyAsync(data.data(), buffer_, bytes,
                                  cudaMemcpyDeviceToHost, stream_),
                  "cudaMemcpyAsync to the host"));
    return CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::Status Reserve(size_t count) {
    if (count <= capacity_) return absl::OkStatus();
    if (buffer_ != nullptr) {
      STRATA_RETURN_IF_ERROR(CheckCuda(cudaFree(buffer_), "cudaFree"));
      buffer_ = nullptr;
      capacity_ = 0;
    }
    void* buffer = nullptr;
    STRATA_RETURN_IF_ERROR(
        CheckCuda(cudaMalloc(&buffer, count * sizeof(float)), "cudaMalloc"));
    buffer_ = static_cast<float*>(buffer);
    capacity_ = count;
    return absl::OkStatus();
  }

  // OK while the communicator works; sets *in_progress while NCCL is still
  // enqueueing or connecting.
  absl::Status CheckCommunicator(absl::string_view what, bool* in_progress) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      return Fail(NcclStatus(result, "ncclCommGetAsyncError"));
    }
    *in_progress = state == ncclInProgress;
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclStatus(state, what));
    }
    return absl::OkStatus();
  }

  absl::Status Timeout(absl::string_view what) {
    return Fail(absl::DeadlineExceededError(
        absl::StrCat(what, " on rank ", rank_, " of ", world_size_,
                     " did not finish within ", absl::FormatDuration(timeout_),
                     " (is every rank running?); the collective is aborted")));
  }

  // Polls until the communicator is no longer in progress.
  absl::Status WaitForCommunicator(absl::string_view what,
                                   absl::Time deadline) {
    while (true) {
      bool in_progress = false;
      STRATA_RETURN_IF_ERROR(CheckCommunicator(what, &in_progress));
      if (!in_progress) return absl::OkStatus();
      if (clock_->Now() >= deadline) return Timeout(what);
      clock_->SleepFor(kPollInterval);
    }
  }

  // Polls until the stream has run the queued work, watching the
  // communicator for errors of the peers.
  absl::Status WaitForStream(absl::string_view what, absl::Time deadline) {
    while (true) {
      const cudaError_t error = cudaStreamQuery(stream_);
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) {
        return Fail(CudaStatus(error, "cudaStreamQuery"));
      }
      bool in_progress = false;
      STRATA_RETURN_IF_ERROR(CheckCommunicator(what, &in_progress));
      if (clock_->Now() >= deadline) return Timeout(what);
      clock_->SleepFor(kPollInterval);
    }
  }

  absl::Status CheckCuda(cudaError_t error, absl::string_view call) {
    if (error == cudaSuccess) return absl::OkStatus();
    return Fail(CudaStatus(error, call));
  }

  // Aborts the communicator (the peers' operations fail too) and makes
  // `status` the answer of every later call.
  absl::Status Fail(absl::Status status) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    broken_ = status;
    return status;
  }

  const int rank_;
  const int world_size_;
  const int device_;
  const absl::Duration timeout_;
  Clock* const clock_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* buffer_ = nullptr;  // capacity_ floats on device_
  size_t capacity_ = 0;
  absl::Status broken_;  // OK until an operation failed
};

absl::Status ValidateOptions(const NcclCollectiveOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size = ", options.world_size, " is not positive"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank = ", options.rank, " is not in 0..", options.world_size - 1));
  }
  if (options.world_size > 1 &&
      (options.rendezvous == nullptr || options.job_id.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job of ", options.world_size,
                     " ranks needs a rendezvous and a job_id"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout = ", absl::FormatDuration(options.timeout),
                     " is not positive"));
  }
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    cudaGetLastError();  // Clears the error for later callers.
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device for NCCL",
        error == cudaSuccess
            ? std::string()
            : absl::StrCat(" (cudaGetDeviceCount: ", cudaGetErrorName(error),
                           ": ", cudaGetErrorString(error), ")")));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device,
                     " does not exist (this machine has ", devices, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const NcclCollectiveOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(options));
  STRATA_ASSIGN_OR_RETURN(const ncclUniqueId id, ExchangeUniqueId(options));
  Clock* clock = options.clock != nullptr ? options.clock : Clock::Real();
  auto collective = std::make_unique<NcclCollective>(options, clock);
  STRATA_RETURN_IF_ERROR(collective->Init(id));
  return std::unique_ptr<Collective>(std::move(collective));
}

}  // namespace strata
