#ifndef STRATA_COMMON_WORK_QUEUE_H_
#define STRATA_COMMON_WORK_QUEUE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// The cores this process may run on (its CPU affinity: a container's
// cpuset, taskset), at least 1.
int UsableCores();

// Lowers the calling thread's priority by `increment` nice levels, at most
// to 19 (Linux keeps a nice value per thread); logs a warning when it
// cannot.
void LowerThisThreadPriority(int increment);

// Load shedding for a server's data path: calls wait in a bounded queue for
// a fixed pool of threads. A call that finds the queue full is refused at
// once (Submit returns false: the caller answers RESOURCE_EXHAUSTED, which
// clients retry with backoff), and a call whose deadline passed while it
// waited is handed to its work as expired, to be answered without being
// done. So an overloaded server spends its time on calls that can still be
// answered in time instead of on a queue every caller has given up on.
// Thread-safe.
//
// Example:
//   queue.SubmitCall(context->deadline(),
//                    [context] { return context->IsCancelled(); },
//                    [=] { return Serve(*request, response); },
//                    [reactor](const absl::Status& s) { reactor->Finish(...);
//                    }, "request");
class WorkQueue {
 public:
  using Deadline = std::chrono::system_clock::time_point;
  // `expired`: the deadline passed before a thread took it.
  using Work = std::function<void(bool expired)>;

  struct Options {
    // Threads doing the work. Default (0): UsableCores().
    int threads = 0;
    // Calls waiting for a thread; past it Submit refuses. Default: 256.
    size_t max_queued = 256;
    // While the oldest waiting call has waited longer than this, Submit
    // refuses too: a bound on queueing delay that follows the work's cost
    // and lets short bursts in. Zero turns it off. Default: off.
    std::chrono::steady_clock::duration max_wait{0};
    // SubmitCall serves a call on the caller's thread (gRPC's) when nothing
    // waits and fewer than `threads` calls are being served: no hand-over
    // to a pool thread and back, which on a busy core costs two context
    // switches and the time until the scheduler runs the other thread. Only
    // for short calls that never block for long (a gRPC thread is held
    // meanwhile). `threads` still bounds the calls served at once.
    bool serve_inline_when_idle = false;
    // Nice increment of the pool threads (0-19; Linux nice is per thread):
    // a loaded core then goes to gRPC's threads first, which receive calls
    // and refuse those past the queue at once. With equal priorities they
    // get a fair share only, fall behind the arrivals under overload, and
    // calls wait unseen in the transport, past every bound the queue sets.
    // Default: 0.
    int thread_nice = 0;
  };

  explicit WorkQueue(const Options& options);
  // Finishes what is queued (as expired when its deadline passed), then
  // joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `work`; false (and `work` dropped unrun) when the queue is full.
  bool Submit(Deadline deadline, Work work);
  // A server call through the queue: `serve` runs on one of its threads and
  // its status goes to `finish`. Instead, `finish` gets DEADLINE_EXCEEDED
  // (and `serve` does not run) when the deadline passed or `cancelled()`
  // holds once a thread takes the call, and RESOURCE_EXHAUSTED at once when
  // the queue is full. `what` names the call in those messages ("request").
  // With serve_inline_when_idle, only a call that may be served inline (one
  // that never blocks for long) is served on the caller's thread.
  void SubmitCall(Deadline deadline, std::function<bool()> cancelled,
                  std::function<absl::Status()> serve,
                  std::function<void(const absl::Status&)> finish,
                  absl::string_view what, bool may_serve_inline = true);

  uint64_t refused() const;
  uint64_t expired() const;
  size_t max_queued() const { return max_queued_; }
  size_t threads() const { return num_threads_; }

 private:
  struct Item {
    Deadline deadline;
    std::chrono::steady_clock::time_point queued;
    Work work;
  };
  enum class Outcome { kQueued, kQueueFull, kWaitTooLong, kStopping };
  Outcome TrySubmit(Deadline deadline, Work work);
  // Takes a serving slot for the caller's thread when nothing waits and
  // one is free; false otherwise.
  bool TryTakeInlineSlot();
  void ReleaseSlot();
  void Serve();

  const size_t max_queued_;
  const std::chrono::steady_clock::duration max_wait_;
  const bool serve_inline_when_idle_;
  const int thread_nice_;
  const size_t num_threads_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Calls being served, on pool threads and inline.
  size_t serving_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace strata

#endif  // STRATA_COMMON_WORK_QUEUE_H_
