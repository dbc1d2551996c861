#ifndef STRATA_COMMON_ADAPTIVE_THROTTLE_H_
#define STRATA_COMMON_ADAPTIVE_THROTTLE_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace strata {

// Client-side throttling of an overloaded server: a server's refusal
// (RESOURCE_EXHAUSTED) is cheaper than serving the request but not free, so
// a server refusing ten times its capacity spends its time refusing. The
// client therefore refuses locally, with the probability
//   max(0, (requests - k * accepts) / (requests + 1))
// over a sliding window, and the server then sees about k times the load it
// accepts (the adaptive throttling of Google's SRE book, "Handling
// Overload"). While the server accepts everything nothing is refused
// locally. A request counts once its outcome is known: when it is refused
// locally, or when its answer is recorded. Calls still in flight are
// neither requests nor accepts, so the burst a cold client sends before
// its first answer does not read as refusals. Thread-safe.
//
// The probability never exceeds max_refusal_probability (as Envoy's
// admission control caps its own): local refusals count as requests, so
// once the formula nears 1 (a server that refused everything for a moment)
// it feeds itself and reopens by only about a factor of k per window,
// from the 1 / (requests + 1) it lets through: minutes for a blip. With
// the default cap a tenth of the calls still reach the server, and their
// accepts reopen the throttle within a few seconds of a start-up blip and
// a few windows of a long outage. Offered loads up to k / (1 - cap) times what
// the server accepts (20x for k = 2) are throttled as before.
//
// Example:
//   if (!throttle.Allow()) return absl::ResourceExhaustedError(...);
//   grpc::Status s = stub->Lookup(...);
//   throttle.Record(AcceptedByServer(
//       static_cast<absl::StatusCode>(s.error_code())));
class AdaptiveThrottle {
 public:
  struct Options {
    // Requests sent per request accepted before local refusals start; >= 1.
    // Lower protects the server more and adapts slower to freed capacity.
    double k = 2.0;
    // How far back requests and accepts count.
    absl::Duration window = absl::Seconds(10);
    // Ceiling of the local refusal probability, in (0, 1].
    double max_refusal_probability = 0.9;
    Clock* clock = Clock::Real();
    uint64_t seed = 1;
  };

  explicit AdaptiveThrottle(const Options& options);

  // Whether to send the next request; counts it as a request when not.
  bool Allow();
  // Records the server's answer to a request that Allow() let through (a
  // request, and an accept when `accepted`, as AcceptedByServer tells).
  void Record(bool accepted);
  // The probability of the next local refusal.
  double RefusalProbability();

 private:
  static constexpr size_t kBuckets = 10;
  struct Bucket {
    int64_t start = 0;  // Bucket number (time / bucket width).
    uint64_t requests = 0;
    uint64_t accepts = 0;
  };

  Bucket& Current(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double Probability(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double k_;
  const double max_refusal_probability_;
  const absl::Duration bucket_width_;
  Clock* const clock_;
  absl::Mutex mu_;
  std::array<Bucket, kBuckets> buckets_ ABSL_GUARDED_BY(mu_);
  uint64_t random_state_ ABSL_GUARDED_BY(mu_);
};

// Whether an answer with `code` counts as accepted for AdaptiveThrottle:
// all but RESOURCE_EXHAUSTED (refused for overload) and DEADLINE_EXCEEDED.
// An overloaded server's transport falls behind before its queue refuses
// anything, and calls then wait unseen until their deadline passes; counted
// as accepted, they would keep the throttle open while the server drowns
// (Envoy's admission control counts both as failures for the same reason).
bool AcceptedByServer(absl::StatusCode code);

}  // namespace strata

#endif  // STRATA_COMMON_ADAPTIVE_THROTTLE_H_
