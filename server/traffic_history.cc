#include "server/traffic_history.h"

namespace strata {
namespace {

// The order of a reading's counters and histograms.
enum Counter { kPulls, kPushes, kKeysPulled, kKeysPushed, kCounters };
enum Histogram { kPullLatency, kPushLatency, kHistograms };

}  // namespace

TrafficHistory::TrafficHistory(const RequestMetrics* metrics, size_t capacity)
    : metrics_(metrics),
      history_({metrics->latency(ShardMethod::kPull).bounds(),
                metrics->latency(ShardMethod::kPush).bounds()},
               capacity) {}

void TrafficHistory::Sample(absl::Time now) {
  CounterReading reading;
  reading.counters.resize(kCounters);
  reading.counters[kPulls] = metrics_->requests(ShardMethod::kPull);
  reading.counters[kPushes] = metrics_->requests(ShardMethod::kPush);
  reading.counters[kKeysPulled] = metrics_->keys_pulled();
  reading.counters[kKeysPushed] = metrics_->keys_pushed();
  reading.histograms.resize(kHistograms);
  reading.histograms[kPullLatency] =
      metrics_->latency(ShardMethod::kPull).Counts();
  reading.histograms[kPushLatency] =
      metrics_->latency(ShardMethod::kPush).Counts();
  history_.Add(now, std::move(reading));
}

std::vector<TrafficSample> TrafficHistory::Samples() const {
  std::vector<TrafficSample> out;
  for (const RateSample& sample : history_.Samples()) {
    if (sample.rates.size() < kCounters || sample.p99s.size() < kHistograms) {
      continue;
    }
    TrafficSample traffic;
    traffic.time = sample.time;
    traffic.pulls_per_second = sample.rates[kPulls];
    traffic.pushes_per_second = sample.rates[kPushes];
    traffic.keys_pulled_per_second = sample.rates[kKeysPulled];
    traffic.keys_pushed_per_second = sample.rates[kKeysPushed];
    traffic.pull_p99_seconds = sample.p99s[kPullLatency];
    traffic.push_p99_seconds = sample.p99s[kPushLatency];
    out.push_back(traffic);
  }
  return out;
}

}  // namespace strata
