#include "common/work_queue.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace strata {

void LowerThisThreadPriority(int increment) {
  const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int current = getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return;
  const int target = std::min(19, current + increment);
  if (setpriority(PRIO_PROCESS, tid, target) != 0) {
    STRATA_LOG(WARNING, "work_queue")
        << "could not lower a request thread's priority to nice " << target
        << ": " << std::strerror(errno);
  }
}

int UsableCores() {
  // std::thread::hardware_concurrency() counts the machine's cores, not
  // those a cpuset or taskset leaves this process.
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    return std::max(1, CPU_COUNT(&allowed));
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

WorkQueue::WorkQueue(const Options& options)
    : max_queued_(std::max<size_t>(1, options.max_queued)),
      max_wait_(options.max_wait),
      serve_inline_when_idle_(options.serve_inline_when_idle),
      thread_nice_(std::clamp(options.thread_nice, 0, 19)),
      num_threads_(static_cast<size_t>(options.threads > 0 ? options.threads
                                                           : UsableCores())) {
  for (size_t i = 0; i < num_threads_; ++i) {
    threads_.emplace_back([this] { Serve(); });
  }
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool WorkQueue::Submit(Deadline deadline, Work work) {
  return TrySubmit(deadline, std::move(work)) == Outcome::kQueued;
}

WorkQueue::Outcome WorkQueue::TrySubmit(Deadline deadline, Work work) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  Outcome outcome = Outcome::kQueued;
  if (stopping_) {
    outcome = Outcome::kStopping;
  } else if (queue_.size() >= max_queued_) {
    outcome = Outcome::kQueueFull;
  } else if (max_wait_.count() > 0 && !queue_.empty() &&
             now - queue_.front().queued > max_wait_) {
    outcome = Outcome::kWaitTooLong;
  }
  if (outcome != Outcome::kQueued) {
    ++refused_;
    return outcome;
  }
  queue_.push_back(Item{deadline, now, std::move(work)});
  return outcome;
}

bool WorkQueue::TryTakeInlineSlot() {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !queue_.empty() || serving_ >= num_threads_) return false;
  ++serving_;
  return true;
}

void WorkQueue::ReleaseSlot() {
  absl::MutexLock lock(&mu_);
  --serving_;
}

void WorkQueue::SubmitCall(Deadline deadline, std::function<bool()> cancelled,
                           std::function<absl::Status()> serve,
                           std::function<void(const absl::Status&)> finish,
                           absl::string_view what, bool may_serve_inline) {
  if (serve_inline_when_idle_ && may_serve_inline && TryTakeInlineSlot()) {
    // Just arrived: its deadline can only have passed if it came in late.
    if (deadline <= std::chrono::system_clock::now() || cancelled()) {
      ReleaseSlot();
      finish(absl::DeadlineExceededError(
          absl::StrCat("the ", what, "'s deadline passed before it arrived")));
      return;
    }
    absl::Status status = serve();
    ReleaseSlot();
    finish(status);
    return;
  }
  const Outcome outcome = TrySubmit(
      deadline, [cancelled = std::move(cancelled), serve = std::move(serve),
                 finish, what = std::string(what)](bool expired) {
        if (expired || cancelled()) {
          // Its caller has given up: no work is done for it.
          finish(absl::DeadlineExceededError(
              absl::StrCat("dropped unprocessed: the ", what,
                           "'s deadline passed while it waited to be served")));
          return;
        }
        finish(serve());
      });
  switch (outcome) {
    case Outcome::kQueued:
      return;
    case Outcome::kQueueFull:
      finish(absl::ResourceExhaustedError(
          absl::StrCat("overloaded: ", max_queued_, " ", what,
                       "s wait already (--max_queued_requests); retry later")));
      return;
    case Outcome::kWaitTooLong:
      finish(absl::ResourceExhaustedError(absl::StrCat(
          "overloaded: the oldest waiting ", what, " has waited over ",
          std::chrono::duration_cast<std::chrono::microseconds>(max_wait_)
                  .count() /
              1000.0,
          " ms (--max_queue_wait_ms); retry later")));
      return;
    case Outcome::kStopping:
      finish(absl::UnavailableError(
          absl::StrCat("shutting down: the ", what, " was not served")));
      return;
  }
}

void WorkQueue::Serve() {
  if (thread_nice_ > 0) LowerThisThreadPriority(thread_nice_);
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      // A pool thread takes a call only while fewer than `threads` are
      // being served (some may be served inline).
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return (!queue_.empty() && serving_ < num_threads_) || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and nothing left.
      item = std::move(queue_.front());
      queue_.pop_front();
      ++serving_;
    }
    const bool expired = item.deadline <= std::chrono::system_clock::now();
    if (expired) {
      absl::MutexLock lock(&mu_);
      ++expired_;
    }
    item.work(expired);
    ReleaseSlot();
  }
}

uint64_t WorkQueue::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

uint64_t WorkQueue::expired() const {
  absl::MutexLock lock(&mu_);
  return expired_;
}

}  // namespace strata
