#include "common/adaptive_concurrency_limit.h"

#include <algorithm>

namespace strata {
namespace {

AdaptiveConcurrencyLimit::Options InRange(
    AdaptiveConcurrencyLimit::Options options) {
  options.min_limit = std::max(1.0, options.min_limit);
  options.max_limit = std::max(options.min_limit, options.max_limit);
  if (!(options.backoff > 0 && options.backoff < 1)) options.backoff = 0.75;
  options.initial_limit =
      std::clamp(options.initial_limit, options.min_limit, options.max_limit);
  return options;
}

}  // namespace

AdaptiveConcurrencyLimit::AdaptiveConcurrencyLimit(const Options& options)
    : options_(InRange(options)), limit_(options_.initial_limit) {}

std::optional<AdaptiveConcurrencyLimit::Ticket>
AdaptiveConcurrencyLimit::TryAcquire() {
  absl::MutexLock lock(&mu_);
  if (static_cast<double>(in_flight_) + 1 > limit_) return std::nullopt;
  ++in_flight_;
  return Ticket{next_ticket_++, 2 * static_cast<double>(in_flight_) >= limit_};
}

void AdaptiveConcurrencyLimit::Release(const Ticket& ticket, bool accepted) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (accepted) {
    if (ticket.busy) limit_ = std::min(options_.max_limit, limit_ + 1 / limit_);
    return;
  }
  if (ticket.number < first_ticket_to_decrease_) return;
  limit_ = std::max(options_.min_limit, limit_ * options_.backoff);
  first_ticket_to_decrease_ = next_ticket_;
}

double AdaptiveConcurrencyLimit::limit() {
  absl::MutexLock lock(&mu_);
  return limit_;
}

int64_t AdaptiveConcurrencyLimit::in_flight() {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace strata
