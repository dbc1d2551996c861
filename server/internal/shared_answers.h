#ifndef STRATA_SERVER_INTERNAL_SHARED_ANSWERS_H_
#define STRATA_SERVER_INTERNAL_SHARED_ANSWERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/pull_wire.h"
#include "common/shared_memory.h"

namespace strata {
namespace v1 {
class SharedAnswer;
}  // namespace v1

namespace server_internal {

struct SharedAnswersOptions {
  // Clients' memories mapped at once; past it a new client is answered
  // over gRPC. Default: 64.
  size_t max_memories = 64;
  // The largest memory a client may offer. Default: 1 GiB.
  size_t max_memory_bytes = size_t{1} << 30;
  // How often the memories of clients that closed them or exited are
  // unmapped. Default: 10 s.
  absl::Duration sweep_every = absl::Seconds(10);
  Clock* clock = Clock::Real();
};

// The shared memories in which clients on this machine take pull answers
// (v1::SharedAnswer): each mapped once, on its first request, and unmapped
// once its client closed it. Thread-safe.
class SharedAnswers {
 public:
  struct Region {
    // Keeps the mapping alive while the answer is written.
    std::shared_ptr<const SharedMemory> memory;
    // The region's claim line, then its room for the answer.
    uint8_t* data = nullptr;
    size_t capacity = 0;
  };

  explicit SharedAnswers(const SharedAnswersOptions& options);

  // The region `request` names. An error refuses the client's memory as a
  // whole (it names why); the client answers it by asking no more.
  absl::StatusOr<Region> Find(const v1::SharedAnswer& request);
  size_t memories() const;

 private:
  struct Mapped {
    std::shared_ptr<const SharedMemory> memory;
    std::string token;
  };

  absl::StatusOr<std::shared_ptr<const SharedMemory>> MemoryFor(
      const v1::SharedAnswer& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SharedAnswersOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Mapped> by_path_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_SHARED_ANSWERS_H_
