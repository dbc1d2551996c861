#include "common/work_queue.h"

#include <atomic>
#include <chrono>

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

}  // namespace
}  // namespace strata
