#ifndef STRATA_COMMON_ADAPTIVE_CONCURRENCY_LIMIT_H_
#define STRATA_COMMON_ADAPTIVE_CONCURRENCY_LIMIT_H_

#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"

namespace strata {

// A client's bound on its calls in flight to an overloadable server,
// adjusted as TCP adjusts its window (additive increase, multiplicative
// decrease): each accepted answer raises the limit by 1 / limit, and a
// refusal for overload (see AcceptedByServer) multiplies it by `backoff`,
// once for all the calls that were already in flight when it came. A call
// beyond the limit is refused locally, at no cost to the server.
//
// Why, next to AdaptiveThrottle: the throttle lets through about k times
// what the server accepts, so an overloaded server still refuses about as
// many calls as it serves, and each refusal costs it a whole gRPC call
// (about half of a 1000-key lookup from its row cache). Bounding what is in
// flight instead keeps about as many calls at the server as its queue
// holds: its queue stays full, and it refuses few. The limit only grows
// while the client uses at least half of it, so a quiet client does not
// build up a limit that a burst would then exceed.
//
// Thread-safe. Example:
//   std::optional<AdaptiveConcurrencyLimit::Ticket> ticket =
//       limit.TryAcquire();
//   if (!ticket) return absl::ResourceExhaustedError(...);
//   grpc::Status s = stub->Lookup(...);
//   limit.Release(*ticket, AcceptedByServer(
//       static_cast<absl::StatusCode>(s.error_code())));
class AdaptiveConcurrencyLimit {
 public:
  struct Options {
    double initial_limit = 16;
    // The limit never falls below min_limit (>= 1: one call is always
    // allowed, whose answer can raise it again) nor rises above max_limit.
    double min_limit = 1;
    double max_limit = 1024;
    // The factor applied on a refusal, in (0, 1).
    double backoff = 0.75;
    // (Values out of these ranges are brought into them.)
  };

  explicit AdaptiveConcurrencyLimit(const Options& options);

  // A call admitted under the limit.
  struct Ticket {
    uint64_t number = 0;
    // At least half of the limit was in flight with it: its acceptance is
    // evidence that the limit may grow.
    bool busy = false;
  };

  // A ticket for a call that may start now (it then counts as in flight
  // until Release), or nothing when the limit is reached.
  std::optional<Ticket> TryAcquire();
  // Ends the call of `ticket`: `accepted` is AcceptedByServer of its answer.
  void Release(const Ticket& ticket, bool accepted);

  double limit();
  int64_t in_flight();

 private:
  const Options options_;
  absl::Mutex mu_;
  double limit_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  // Refusals of calls with smaller tickets (sent before the last decrease)
  // do not decrease the limit again.
  uint64_t first_ticket_to_decrease_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_COMMON_ADAPTIVE_CONCURRENCY_LIMIT_H_
