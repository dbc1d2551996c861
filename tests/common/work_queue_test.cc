#include "common/work_queue.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

WorkQueue::Deadline In(std::chrono::milliseconds from_now) {
  return std::chrono::system_clock::now() + from_now;
}

TEST(WorkQueueTest, RunsWorkOnItsThreads) {
  std::atomic<int> done{0};
  {
    WorkQueue queue(WorkQueue::Options{2, 16});
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [&](bool expired) {
        EXPECT_FALSE(expired);
        ++done;
      }));
    }
  }  // The destructor finishes what is queued.
  EXPECT_EQ(done.load(), 10);
}

int ThisThreadsNice() {
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

TEST(WorkQueueTest, ThreadsRunAtTheirNiceIncrementAndCallersDoNot) {
  const int callers = ThisThreadsNice();
  std::atomic<int> pool_nice{-100};
  {
    WorkQueue::Options options;
    options.threads = 1;
    options.thread_nice = 5;
    WorkQueue queue(options);
    ASSERT_TRUE(queue.Submit(In(std::chrono::seconds(10)),
                             [&](bool) { pool_nice = ThisThreadsNice(); }));
  }
  EXPECT_EQ(pool_nice.load(), std::min(19, callers + 5));
  // Linux keeps nice per thread: the caller's own priority is untouched.
  EXPECT_EQ(ThisThreadsNice(), callers);
}

TEST(WorkQueueTest, AFullQueueRefusesAtOnce) {
  absl::Notification started, release;
  WorkQueue queue(WorkQueue::Options{1, 2});
  ASSERT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [&](bool) {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  // The one thread is busy: two calls may wait, the third is refused.
  EXPECT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [](bool) {}));
  EXPECT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [](bool) {}));
  EXPECT_FALSE(queue.Submit(In(std::chrono::seconds(10)), [](bool) {}));
  EXPECT_EQ(queue.refused(), 1u);
  release.Notify();
}

TEST(WorkQueueTest, WorkWhoseDeadlinePassedIsHandedOverAsExpired) {
  absl::Notification done;
  bool was_expired = false;
  WorkQueue queue(WorkQueue::Options{1, 4});
  ASSERT_TRUE(queue.Submit(In(std::chrono::milliseconds(-1)), [&](bool late) {
    was_expired = late;
    done.Notify();
  }));
  done.WaitForNotification();
  EXPECT_TRUE(was_expired);
  EXPECT_EQ(queue.expired(), 1u);
}

TEST(WorkQueueTest, RefusesWhileTheOldestWaitingCallHasWaitedTooLong) {
  absl::Notification started, release;
  WorkQueue::Options options{1, 100};
  options.max_wait = std::chrono::milliseconds(20);
  WorkQueue queue(options);
  ASSERT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [&](bool) {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  const auto queued_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [](bool) {}));
  // A burst is let in while the oldest has waited less than the bound.
  EXPECT_TRUE(queue.Submit(In(std::chrono::seconds(10)), [](bool) {}));
  // The bound is a duration: this waits for it to pass, and no longer.
  while (std::chrono::steady_clock::now() - queued_at <=
         std::chrono::milliseconds(25)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  absl::Status refusal;
  queue.SubmitCall(
      In(std::chrono::seconds(10)), [] { return false; },
      [] { return absl::OkStatus(); },
      [&](const absl::Status& status) { refusal = status; }, "lookup");
  EXPECT_EQ(refusal.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refusal.message().find("--max_queue_wait_ms"),
            absl::string_view::npos)
      << refusal;
  EXPECT_EQ(queue.refused(), 1u);
  release.Notify();
  // Once the waiting calls are served, new ones are taken again.
  absl::Notification served;
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool taken = false;
  while (!taken && std::chrono::steady_clock::now() < give_up) {
    taken = queue.Submit(In(std::chrono::seconds(10)),
                         [&](bool) { served.Notify(); });
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(taken);
  served.WaitForNotification();
}

TEST(WorkQueueTest, ACallThatMayNotBeServedInlineGoesToThePool) {
  WorkQueue::Options options{1, 16};
  options.serve_inline_when_idle = true;
  WorkQueue queue(options);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id served_on;
  absl::Notification done;
  queue.SubmitCall(
      In(std::chrono::seconds(10)), [] { return false; },
      [&] {
        served_on = std::this_thread::get_id();
        return absl::OkStatus();
      },
      [&](const absl::Status&) { done.Notify(); }, "push",
      /*may_serve_inline=*/false);
  done.WaitForNotification();
  EXPECT_NE(served_on, caller);
}

TEST(WorkQueueTest, AnIdleQueueServesInlineAndABusyOneQueues) {
  WorkQueue::Options options{1, 16};
  options.serve_inline_when_idle = true;
  WorkQueue queue(options);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id served_on;
  absl::Status finished = absl::UnknownError("not finished");
  queue.SubmitCall(
      In(std::chrono::seconds(10)), [] { return false; },
      [&] {
        served_on = std::this_thread::get_id();
        return absl::OkStatus();
      },
      [&](const absl::Status& status) { finished = status; }, "lookup");
  // Served and finished before SubmitCall returned, on the caller's thread.
  EXPECT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(served_on, caller);

  // While one call is served (its one slot taken), the next one waits for
  // the pool thread instead of running beside it.
  absl::Notification started, release, second_done;
  std::thread first([&] {
    queue.SubmitCall(
        In(std::chrono::seconds(10)), [] { return false; },
        [&] {
          started.Notify();
          release.WaitForNotification();
          return absl::OkStatus();
        },
        [](const absl::Status&) {}, "lookup");
  });
  started.WaitForNotification();
  std::thread::id second_on;
  queue.SubmitCall(
      In(std::chrono::seconds(10)), [] { return false; },
      [&] {
        second_on = std::this_thread::get_id();
        return absl::OkStatus();
      },
      [&](const absl::Status&) { second_done.Notify(); }, "lookup");
  EXPECT_FALSE(second_done.HasBeenNotified());
  release.Notify();
  first.join();
  second_done.WaitForNotification();
  EXPECT_NE(second_on, caller);
}

TEST(WorkQueueTest, DefaultThreadsFollowTheCpuAffinity) {
  // On a thread of its own, so that the test's other threads keep theirs;
  // threads started from it inherit its affinity.
  std::thread pinned([] {
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    int first = 0;
    while (!CPU_ISSET(first, &allowed)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(UsableCores(), 1);
    WorkQueue queue(WorkQueue::Options{0, 4});
    EXPECT_EQ(queue.threads(), 1u);
  });
  pinned.join();
  EXPECT_GE(UsableCores(), 1);
}

}  // namespace
}  // namespace strata
