#include "common/adaptive_concurrency_limit.h"

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

AdaptiveConcurrencyLimit::Options OptionsWith(double initial) {
  AdaptiveConcurrencyLimit::Options options;
  options.initial_limit = initial;
  options.backoff = 0.5;
  return options;
}

TEST(AdaptiveConcurrencyLimitTest, AdmitsUpToTheLimitThenRefusesLocally) {
  AdaptiveConcurrencyLimit limit(OptionsWith(4));
  std::vector<AdaptiveConcurrencyLimit::Ticket> tickets;
  for (int i = 0; i < 4; ++i) {
    std::optional<AdaptiveConcurrencyLimit::Ticket> ticket = limit.TryAcquire();
    ASSERT_TRUE(ticket.has_value()) << "call " << i;
    tickets.push_back(*ticket);
  }
  EXPECT_FALSE(limit.TryAcquire().has_value());
  EXPECT_EQ(limit.in_flight(), 4);
  // One ends: one more may start.
  limit.Release(tickets[0], /*accepted=*/true);
  EXPECT_TRUE(limit.TryAcquire().has_value());
  EXPECT_FALSE(limit.TryAcquire().has_value());
}

// Refusals of calls that were all in flight together say one thing (the
// server was full then): the limit falls once for them, not once each.
TEST(AdaptiveConcurrencyLimitTest, RefusalsOfOneWindowDecreaseOnce) {
  AdaptiveConcurrencyLimit limit(OptionsWith(8));
  std::vector<AdaptiveConcurrencyLimit::Ticket> tickets;
  for (int i = 0; i < 8; ++i) tickets.push_back(*limit.TryAcquire());
  for (const auto& ticket : tickets) limit.Release(ticket, /*accepted=*/false);
  EXPECT_DOUBLE_EQ(limit.limit(), 4);
  // A call sent after the decrease is refused too: the limit falls again.
  const AdaptiveConcurrencyLimit::Ticket later = *limit.TryAcquire();
  limit.Release(later, /*accepted=*/false);
  EXPECT_DOUBLE_EQ(limit.limit(), 2);
}

TEST(AdaptiveConcurrencyLimitTest, NeverFallsBelowOneCall) {
  AdaptiveConcurrencyLimit limit(OptionsWith(8));
  for (int i = 0; i < 50; ++i) {
    std::optional<AdaptiveConcurrencyLimit::Ticket> ticket = limit.TryAcquire();
    ASSERT_TRUE(ticket.has_value()) << "call " << i;
    limit.Release(*ticket, /*accepted=*/false);
  }
  EXPECT_DOUBLE_EQ(limit.limit(), 1);
}

TEST(AdaptiveConcurrencyLimitTest, GrowsWhileItsLimitIsUsed) {
  AdaptiveConcurrencyLimit limit(OptionsWith(4));
  // Windows of as many calls as the limit allows, all accepted: each call
  // started with at least half the limit in flight adds 1 / limit, about
  // half to three quarters of a call per window.
  for (int i = 0; i < 8; ++i) {
    std::vector<AdaptiveConcurrencyLimit::Ticket> tickets;
    while (std::optional<AdaptiveConcurrencyLimit::Ticket> ticket =
               limit.TryAcquire()) {
      tickets.push_back(*ticket);
    }
    for (const auto& ticket : tickets) limit.Release(ticket, true);
  }
  EXPECT_GT(limit.limit(), 7);
  EXPECT_LT(limit.limit(), 9);
}

// A client with one call at a time does not build up a limit of hundreds
// that a later burst would send all at once.
TEST(AdaptiveConcurrencyLimitTest, DoesNotGrowWhileLightlyUsed) {
  AdaptiveConcurrencyLimit limit(OptionsWith(16));
  for (int i = 0; i < 10000; ++i) {
    limit.Release(*limit.TryAcquire(), /*accepted=*/true);
  }
  EXPECT_DOUBLE_EQ(limit.limit(), 16);
}

// A server that holds `capacity` calls and refuses the rest: a client that
// always has more to send settles near `capacity` in flight, and most of
// its calls are accepted (the point of the limit: an overloaded server
// refuses few calls).
TEST(AdaptiveConcurrencyLimitTest, SettlesNearWhatTheServerHolds) {
  AdaptiveConcurrencyLimit::Options options;  // the defaults: 16, 0.75
  AdaptiveConcurrencyLimit limit(options);
  constexpr int kCapacity = 5;
  std::deque<AdaptiveConcurrencyLimit::Ticket> at_server;
  int accepted = 0, refused = 0;
  for (int step = 0; step < 20000; ++step) {
    // Send while the limit allows; a call beyond what the server holds is
    // refused at once.
    while (std::optional<AdaptiveConcurrencyLimit::Ticket> ticket =
               limit.TryAcquire()) {
      if (at_server.size() < kCapacity) {
        at_server.push_back(*ticket);
      } else {
        limit.Release(*ticket, /*accepted=*/false);
        ++refused;
      }
    }
    // The server answers the oldest.
    if (!at_server.empty()) {
      limit.Release(at_server.front(), /*accepted=*/true);
      at_server.pop_front();
      ++accepted;
    }
  }
  EXPECT_GE(limit.limit(), 3);
  EXPECT_LE(limit.limit(), 2 * kCapacity);
  EXPECT_LT(refused, accepted / 5) << "accepted " << accepted;
}

TEST(AdaptiveConcurrencyLimitTest, ThreadsNeverExceedTheLimit) {
  AdaptiveConcurrencyLimit::Options options = OptionsWith(2);
  options.max_limit = 2;
  AdaptiveConcurrencyLimit limit(options);
  std::atomic<int> in_flight{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::optional<AdaptiveConcurrencyLimit::Ticket> ticket =
            limit.TryAcquire();
        if (!ticket) continue;
        const int now = ++in_flight;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --in_flight;
        // Refused now and then, so that the limit moves both ways.
        limit.Release(*ticket, /*accepted=*/i % 64 != 0);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(limit.in_flight(), 0);
  EXPECT_LE(most.load(), 2);  // of four threads
  EXPECT_GE(most.load(), 1);
}

}  // namespace
}  // namespace strata
