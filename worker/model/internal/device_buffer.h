#ifndef STRATA_WORKER_MODEL_INTERNAL_DEVICE_BUFFER_H_
#define STRATA_WORKER_MODEL_INTERNAL_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "worker/model/internal/cuda_status.h"

namespace strata {
namespace model_internal {

// An array of T in device memory that only grows: Reserve(n) keeps the
// allocation when it already holds n values, so that batches of varying size
// reuse it. Movable, not copyable; not thread-safe.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  // Room for `count` values on the current device; the contents are lost
  // when the buffer grows. RESOURCE_EXHAUSTED when device memory runs out.
  absl::Status Reserve(size_t count) {
    if (count <= capacity_) return absl::OkStatus();
    if (data_ != nullptr) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaFree(data_));
      data_ = nullptr;
      capacity_ = 0;
    }
    void* data = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, count * sizeof(T)));
    data_ = static_cast<T*>(data);
    capacity_ = count;
    return absl::OkStatus();
  }

  T* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_DEVICE_BUFFER_H_
