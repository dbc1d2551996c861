#ifndef STRATA_SERVER_TRAFFIC_HISTORY_H_
#define STRATA_SERVER_TRAFFIC_HISTORY_H_

#include <vector>

#include "absl/time/time.h"
#include "common/rate_history.h"
#include "server/request_metrics.h"

namespace strata {

// One second (or so) of a shard's traffic.
struct TrafficSample {
  absl::Time time;
  double pulls_per_second = 0;
  double pushes_per_second = 0;
  double keys_pulled_per_second = 0;
  double keys_pushed_per_second = 0;
  // Of the calls in the interval; 0 without calls.
  double pull_p99_seconds = 0;
  double push_p99_seconds = 0;
};

// The last minutes of a shard's traffic for its status page's charts: each
// Sample() turns what RequestMetrics counted since the previous one into
// rates and interval p99s (common/rate_history.h). Thread-safe.
class TrafficHistory {
 public:
  // Keeps the last `capacity` samples (a sample a second: 5 minutes).
  explicit TrafficHistory(const RequestMetrics* metrics, size_t capacity = 300);

  void Sample(absl::Time now);
  // Oldest first.
  std::vector<TrafficSample> Samples() const;

 private:
  const RequestMetrics* const metrics_;
  RateHistory history_;
};

}  // namespace strata

#endif  // STRATA_SERVER_TRAFFIC_HISTORY_H_
