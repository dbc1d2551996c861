#include "common/rate_history.h"

#include <utility>

#include "common/metrics.h"

namespace strata {

std::vector<double> RateSeries(const std::vector<RateSample>& history,
                               std::vector<double> RateSample::*field,
                               size_t index, double scale) {
  std::vector<double> values;
  values.reserve(history.size());
  for (const RateSample& sample : history) {
    const std::vector<double>& column = sample.*field;
    values.push_back(index < column.size() ? column[index] * scale : 0);
  }
  return values;
}
namespace {

double Rate(uint64_t now, uint64_t before, double seconds) {
  return now >= before ? static_cast<double>(now - before) / seconds : 0;
}

// Per-bucket counts observed between two readings.
std::vector<uint64_t> Delta(const std::vector<uint64_t>& now,
                            const std::vector<uint64_t>& before) {
  std::vector<uint64_t> out(now.size());
  for (size_t b = 0; b < now.size(); ++b) {
    out[b] = b < before.size() && now[b] >= before[b] ? now[b] - before[b] : 0;
  }
  return out;
}

}  // namespace

RateHistory::RateHistory(std::vector<absl::Span<const double>> bounds,
                         size_t capacity)
    : bounds_(std::move(bounds)), capacity_(capacity) {}

void RateHistory::Add(absl::Time now, CounterReading reading) {
  absl::MutexLock lock(&mu_);
  if (started_ && now > last_time_) {
    const double seconds = absl::ToDoubleSeconds(now - last_time_);
    RateSample sample;
    sample.time = now;
    for (size_t c = 0; c < reading.counters.size(); ++c) {
      sample.rates.push_back(
          Rate(reading.counters[c],
               c < last_.counters.size() ? last_.counters[c] : 0, seconds));
    }
    for (size_t h = 0; h < reading.histograms.size() && h < bounds_.size();
         ++h) {
      const std::vector<uint64_t> before = h < last_.histograms.size()
                                               ? last_.histograms[h]
                                               : std::vector<uint64_t>();
      sample.p99s.push_back(HistogramQuantile(
          bounds_[h], Delta(reading.histograms[h], before), 0.99));
    }
    sample.gauges = reading.gauges;
    samples_.push_back(std::move(sample));
    while (samples_.size() > capacity_) samples_.pop_front();
  }
  started_ = true;
  last_time_ = now;
  last_ = std::move(reading);
}

std::vector<RateSample> RateHistory::Samples() const {
  absl::MutexLock lock(&mu_);
  return std::vector<RateSample>(samples_.begin(), samples_.end());
}

PeriodicTask::PeriodicTask(absl::Duration interval, std::function<void()> task)
    : thread_([this, interval, task = std::move(task)] {
        task();
        while (!stop_.WaitForNotificationWithTimeout(interval)) task();
      }) {}

PeriodicTask::~PeriodicTask() {
  stop_.Notify();
  thread_.join();
}

}  // namespace strata
