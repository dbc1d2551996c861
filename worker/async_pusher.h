#ifndef STRATA_WORKER_ASYNC_PUSHER_H_
#define STRATA_WORKER_ASYNC_PUSHER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace strata {

class PsClient;

// Pushes sparse gradients on a background thread, so that a step does not
// wait for its push. At most `max_pending` pushes are queued or in flight:
// Push blocks beyond that, which bounds how stale the rows this worker
// pulls can be with respect to its own updates. The first failed push
// fails every later call (the trainer stops). Thread-safe.
class AsyncPusher {
 public:
  // REQUIRES: ps outlives the pusher; max_pending >= 1. With
  // `distinct_keys`, every Push's keys are distinct (a batch's unique keys):
  // they go out by PsClient::PushDistinct.
  AsyncPusher(PsClient* ps, std::string table, int max_pending,
              bool distinct_keys);
  ~AsyncPusher();  // drains the queue
  AsyncPusher(const AsyncPusher&) = delete;
  AsyncPusher& operator=(const AsyncPusher&) = delete;

  // Queues a push of `gradients` (keys.size() x dim) for `keys`, of the
  // trainer's `global_step` (0: unknown). Returns the error of an earlier
  // push, if any.
  absl::Status Push(std::vector<uint64_t> keys, std::vector<float> gradients,
                    uint64_t global_step = 0);

  // Waits until every queued push has been acknowledged; its error if one
  // failed.
  absl::Status Drain();

  int64_t pushed_keys() const;

 private:
  struct Job {
    std::vector<uint64_t> keys;
    std::vector<float> gradients;
    uint64_t global_step = 0;
  };
  void Loop();

  PsClient* const ps_;
  const std::string table_;
  const size_t max_pending_;
  const bool distinct_keys_;

  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t pushed_keys_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_WORKER_ASYNC_PUSHER_H_
