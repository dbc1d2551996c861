#include "common/adaptive_throttle.h"

#include <algorithm>

namespace strata {

AdaptiveThrottle::AdaptiveThrottle(const Options& options)
    : k_(std::max(1.0, options.k)),
      max_refusal_probability_(
          std::clamp(options.max_refusal_probability, 0.0, 1.0)),
      bucket_width_(std::max(options.window / kBuckets, absl::Milliseconds(1))),
      clock_(options.clock),
      random_state_(options.seed | 1) {}

AdaptiveThrottle::Bucket& AdaptiveThrottle::Current(absl::Time now) {
  const int64_t number = absl::ToInt64Nanoseconds(now - absl::UnixEpoch()) /
                         absl::ToInt64Nanoseconds(bucket_width_);
  Bucket& bucket = buckets_[static_cast<size_t>(number) % kBuckets];
  if (bucket.start != number) bucket = Bucket{number, 0, 0};
  return bucket;
}

double AdaptiveThrottle::Probability(absl::Time now) {
  const int64_t newest = Current(now).start;
  double requests = 0;
  double accepts = 0;
  for (const Bucket& bucket : buckets_) {
    // Buckets not written for a whole window hold nothing current.
    if (newest - bucket.start >= static_cast<int64_t>(kBuckets)) continue;
    requests += static_cast<double>(bucket.requests);
    accepts += static_cast<double>(bucket.accepts);
  }
  return std::clamp((requests - k_ * accepts) / (requests + 1), 0.0,
                    max_refusal_probability_);
}

bool AdaptiveThrottle::Allow() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  const double probability = Probability(now);
  if (probability <= 0) return true;
  // xorshift64: cheap, and reproducible from the seed in tests.
  random_state_ ^= random_state_ << 13;
  random_state_ ^= random_state_ >> 7;
  random_state_ ^= random_state_ << 17;
  const double uniform =
      static_cast<double>(random_state_ >> 11) * (1.0 / 9007199254740992.0);
  if (uniform >= probability) return true;
  ++Current(now).requests;  // Refused here: its outcome is known now.
  return false;
}

void AdaptiveThrottle::Record(bool accepted) {
  absl::MutexLock lock(&mu_);
  Bucket& bucket = Current(clock_->Now());
  ++bucket.requests;
  if (accepted) ++bucket.accepts;
}

bool AcceptedByServer(absl::StatusCode code) {
  return code != absl::StatusCode::kResourceExhausted &&
         code != absl::StatusCode::kDeadlineExceeded;
}

double AdaptiveThrottle::RefusalProbability() {
  absl::MutexLock lock(&mu_);
  return Probability(clock_->Now());
}

}  // namespace strata
