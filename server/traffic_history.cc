#include "server/traffic_history.h"

namespace strata {
namespace {

// Per-bucket counts observed between two reads.
std::vector<uint64_t> Delta(const std::vector<uint64_t>& now,
                            const std::vector<uint64_t>& before) {
  std::vector<uint64_t> out(now.size());
  for (size_t b = 0; b < now.size(); ++b) {
    out[b] = b < before.size() && now[b] >= before[b] ? now[b] - before[b] : 0;
  }
  return out;
}

double Rate(uint64_t now, uint64_t before, double seconds) {
  return now >= before ? static_cast<double>(now - before) / seconds : 0;
}

}  // namespace

TrafficHistory::TrafficHistory(const RequestMetrics* metrics, size_t capacity)
    : metrics_(metrics), capacity_(capacity) {}

TrafficHistory::Totals TrafficHistory::Read() const {
  Totals totals;
  totals.pulls = metrics_->requests(ShardMethod::kPull);
  totals.pushes = metrics_->requests(ShardMethod::kPush);
  totals.keys_pulled = metrics_->keys_pulled();
  totals.keys_pushed = metrics_->keys_pushed();
  totals.pull_latency = metrics_->latency(ShardMethod::kPull).Counts();
  totals.push_latency = metrics_->latency(ShardMethod::kPush).Counts();
  return totals;
}

void TrafficHistory::Sample(absl::Time now) {
  Totals totals = Read();
  absl::MutexLock lock(&mu_);
  if (started_ && now > last_time_) {
    const double seconds = absl::ToDoubleSeconds(now - last_time_);
    TrafficSample sample;
    sample.time = now;
    sample.pulls_per_second = Rate(totals.pulls, last_.pulls, seconds);
    sample.pushes_per_second = Rate(totals.pushes, last_.pushes, seconds);
    sample.keys_pulled_per_second =
        Rate(totals.keys_pulled, last_.keys_pulled, seconds);
    sample.keys_pushed_per_second =
        Rate(totals.keys_pushed, last_.keys_pushed, seconds);
    const absl::Span<const double> bounds =
        metrics_->latency(ShardMethod::kPull).bounds();
    sample.pull_p99_seconds = HistogramQuantile(
        bounds, Delta(totals.pull_latency, last_.pull_latency), 0.99);
    sample.push_p99_seconds = HistogramQuantile(
        bounds, Delta(totals.push_latency, last_.push_latency), 0.99);
    samples_.push_back(sample);
    while (samples_.size() > capacity_) samples_.pop_front();
  }
  started_ = true;
  last_time_ = now;
  last_ = std::move(totals);
}

std::vector<TrafficSample> TrafficHistory::Samples() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TrafficSample>(samples_.begin(), samples_.end());
}

TrafficSampler::TrafficSampler(TrafficHistory* history, absl::Duration interval)
    : thread_([this, history, interval] {
        history->Sample(absl::Now());
        while (!stop_.WaitForNotificationWithTimeout(interval)) {
          history->Sample(absl::Now());
        }
      }) {}

TrafficSampler::~TrafficSampler() {
  stop_.Notify();
  thread_.join();
}

}  // namespace strata
