#ifndef STRATA_COMMON_RATE_HISTORY_H_
#define STRATA_COMMON_RATE_HISTORY_H_

// The last minutes of a daemon's traffic, for the charts of its status
// page: readings of monotonic counters and latency histograms, taken about
// once a second, become per-second rates and per-interval p99s.

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace strata {

// Totals at one moment: counters, per-bucket counts of histograms, and
// gauges (taken as they are).
struct CounterReading {
  std::vector<uint64_t> counters;
  std::vector<std::vector<uint64_t>> histograms;
  std::vector<double> gauges;
};

// One interval: each counter's increase per second, each histogram's p99
// of the observations in the interval (0 without any), and the gauges at
// its end.
struct RateSample {
  absl::Time time;
  std::vector<double> rates;
  std::vector<double> p99s;
  std::vector<double> gauges;
};

// One line of a status-page chart: field[index] of every sample (rates,
// p99s or gauges), times `scale`, oldest first; 0 where a sample has no such
// entry.
std::vector<double> RateSeries(const std::vector<RateSample>& history,
                               std::vector<double> RateSample::*field,
                               size_t index, double scale = 1);

// Keeps the last `capacity` samples (a sample a second: 5 minutes).
// Thread-safe.
class RateHistory {
 public:
  // bounds[h]: the upper bounds of histogram h of every reading.
  explicit RateHistory(std::vector<absl::Span<const double>> bounds,
                       size_t capacity = 300);

  // The first reading only sets the baseline.
  void Add(absl::Time now, CounterReading reading);
  // Oldest first.
  std::vector<RateSample> Samples() const;

 private:
  const std::vector<absl::Span<const double>> bounds_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_time_ ABSL_GUARDED_BY(mu_);
  CounterReading last_ ABSL_GUARDED_BY(mu_);
  std::deque<RateSample> samples_ ABSL_GUARDED_BY(mu_);
};

// Calls `task` every `interval` on a thread of its own, from construction
// to destruction (which waits for a call in progress).
class PeriodicTask {
 public:
  PeriodicTask(absl::Duration interval, std::function<void()> task);
  ~PeriodicTask();
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_COMMON_RATE_HISTORY_H_
