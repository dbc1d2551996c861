#include "common/adaptive_throttle.h"

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace strata {
namespace {

AdaptiveThrottle::Options OptionsWith(testing::FakeClock* clock, double k) {
  AdaptiveThrottle::Options options;
  options.k = k;
  options.window = absl::Seconds(10);
  options.clock = clock;
  return options;
}

TEST(AdaptiveThrottleTest, NeverRefusesWhileTheServerAcceptsEverything) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 1.1));
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(throttle.Allow()) << "request " << i;
    throttle.Record(true);
    clock.Advance(absl::Milliseconds(3));
  }
  EXPECT_EQ(throttle.RefusalProbability(), 0.0);
}

// A cold client's first calls all leave before any answer is back (its
// connection is still being made, say): they are not refusals yet. Counted
// as requests without accepts, they opened the throttle from the second
// call on, and with k near 1 it did not recover.
TEST(AdaptiveThrottleTest, CallsInFlightDoNotCountUntilAnswered) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 1.25));
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(throttle.Allow()) << "call " << i;
    clock.Advance(absl::Microseconds(50));
  }
  EXPECT_EQ(throttle.RefusalProbability(), 0.0);
  for (int i = 0; i < 200; ++i) throttle.Record(true);
  EXPECT_EQ(throttle.RefusalProbability(), 0.0);
}

// Offers `offered` requests per second for `seconds` to a server that
// accepts at most `capacity` per second; returns how many reached the
// server in the last second.
int SentInLastSecond(AdaptiveThrottle& throttle, testing::FakeClock& clock,
                     int offered, int capacity, int seconds) {
  int sent_last_second = 0;
  for (int second = 0; second < seconds; ++second) {
    int accepted = 0;
    int sent = 0;
    for (int i = 0; i < offered; ++i) {
      clock.Advance(absl::Seconds(1) / offered);
      if (!throttle.Allow()) continue;
      ++sent;
      const bool accept = accepted < capacity;
      accepted += accept ? 1 : 0;
      throttle.Record(accept);
    }
    sent_last_second = sent;
  }
  return sent_last_second;
}

TEST(AdaptiveThrottleTest, TenTimesOverloadReachesTheServerAsAboutKTimesIt) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 2.0));
  const int sent = SentInLastSecond(throttle, clock, /*offered=*/1000,
                                    /*capacity=*/100, /*seconds=*/30);
  // k = 2: the server sees about twice what it accepts, not ten times.
  EXPECT_GT(sent, 150);
  EXPECT_LT(sent, 300);
  EXPECT_NEAR(throttle.RefusalProbability(), 0.8, 0.05);
}

TEST(AdaptiveThrottleTest, ALowerKSendsLessOfTheExcess) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 1.1));
  const int sent = SentInLastSecond(throttle, clock, 1000, 100, 30);
  EXPECT_GT(sent, 90);
  EXPECT_LT(sent, 140);
}

TEST(AdaptiveThrottleTest, RefusalsStopOnceTheOverloadLeavesTheWindow) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 2.0));
  SentInLastSecond(throttle, clock, 1000, 100, 20);
  ASSERT_GT(throttle.RefusalProbability(), 0.5);
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(throttle.RefusalProbability(), 0.0);
  EXPECT_TRUE(throttle.Allow());
}

// A server that refused a client's first calls (a stall while the client
// started) left the formula at requests / (requests + 1): every later call
// was refused locally and counted as another request, so the throttle let
// through about one call in a thousand for the rest of the window and
// reopened by a factor of k per window after it.
TEST(AdaptiveThrottleTest, ARefusedStartDoesNotShutTheThrottle) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 2.0));
  for (int i = 0; i < 100; ++i) {
    if (throttle.Allow()) throttle.Record(false);
  }
  EXPECT_NEAR(throttle.RefusalProbability(), 0.9, 1e-9);
  // The server accepts everything from now on.
  const int sent = SentInLastSecond(throttle, clock, /*offered=*/1000,
                                    /*capacity=*/1000, /*seconds=*/5);
  EXPECT_GE(sent, 950);
}

TEST(AdaptiveThrottleTest, ReopensWithinTwoAndAHalfWindowsOfAnOutage) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 2.0));
  // The server refuses everything for three windows...
  EXPECT_LE(SentInLastSecond(throttle, clock, 1000, 0, 30), 110);
  // ...and then accepts everything again.
  EXPECT_GE(SentInLastSecond(throttle, clock, 1000, 1000, 25), 950);
}

TEST(AdaptiveThrottleTest, ACapOfOneRefusesNearlyEverythingOfADeadServer) {
  testing::FakeClock clock;
  AdaptiveThrottle::Options options = OptionsWith(&clock, 2.0);
  options.max_refusal_probability = 1.0;
  AdaptiveThrottle throttle(options);
  EXPECT_LE(SentInLastSecond(throttle, clock, 1000, 0, 30), 2);
  EXPECT_GT(throttle.RefusalProbability(), 0.999);
}

TEST(AdaptiveThrottleTest, KBelowOneIsTakenAsOne) {
  testing::FakeClock clock;
  AdaptiveThrottle throttle(OptionsWith(&clock, 0.1));
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(throttle.Allow());
    throttle.Record(true);
  }
  // With k clamped to 1, an accepted request never leads to refusals.
  EXPECT_EQ(throttle.RefusalProbability(), 0.0);
}

TEST(AdaptiveThrottleTest, RefusalsAndLateAnswersAreNotAccepted) {
  EXPECT_FALSE(AcceptedByServer(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(AcceptedByServer(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(AcceptedByServer(absl::StatusCode::kOk));
  // The server answered: the call's fault, not the server's load.
  EXPECT_TRUE(AcceptedByServer(absl::StatusCode::kNotFound));
  EXPECT_TRUE(AcceptedByServer(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata
