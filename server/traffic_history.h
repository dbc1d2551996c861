#ifndef STRATA_SERVER_TRAFFIC_HISTORY_H_
#define STRATA_SERVER_TRAFFIC_HISTORY_H_

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
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
// rates and interval p99s. Thread-safe.
class TrafficHistory {
 public:
  // Keeps the last `capacity` samples (a sample a second: 5 minutes).
  explicit TrafficHistory(const RequestMetrics* metrics, size_t capacity = 300);

  void Sample(absl::Time now);
  // Oldest first.
  std::vector<TrafficSample> Samples() const;

 private:
  struct Totals {
    uint64_t pulls = 0, pushes = 0, keys_pulled = 0, keys_pushed = 0;
    std::vector<uint64_t> pull_latency, push_latency;
  };
  Totals Read() const;

  const RequestMetrics* const metrics_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_time_ ABSL_GUARDED_BY(mu_);
  Totals last_ ABSL_GUARDED_BY(mu_);
  std::deque<TrafficSample> samples_ ABSL_GUARDED_BY(mu_);
};

// Calls history->Sample() every `interval` on a thread of its own, from
// construction to destruction.
class TrafficSampler {
 public:
  TrafficSampler(TrafficHistory* history, absl::Duration interval);
  ~TrafficSampler();
  TrafficSampler(const TrafficSampler&) = delete;
  TrafficSampler& operator=(const TrafficSampler&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_TRAFFIC_HISTORY_H_
