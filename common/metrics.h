#ifndef STRATA_COMMON_METRICS_H_
#define STRATA_COMMON_METRICS_H_

// The /metrics page of every daemon, in prometheus-cpp's data model
// (Debian's prometheus-cpp-dev, core library only): each part of a daemon
// adds its families to a MetricFamilies at scrape time, and
// prometheus::TextSerializer writes the exposition format, escaping and
// number formatting included. Counters stay lock-free atomics where they are
// counted (the hot paths never take the library's per-metric mutexes); a
// scrape reads them.

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "prometheus/metric_family.h"

namespace strata {

using MetricFamilies = std::vector<prometheus::MetricFamily>;
using MetricLabels = std::initializer_list<std::pair<const char*, std::string>>;

// Appends a family; every family has a HELP text.
prometheus::MetricFamily& AddFamily(MetricFamilies* families, std::string name,
                                    std::string help,
                                    prometheus::MetricType type);

// One sample of a counter or gauge family.
void AddSample(prometheus::MetricFamily& family, MetricLabels labels,
               double value);
// Shorthand for a family of one unlabelled sample.
void AddCounter(MetricFamilies* families, std::string name, std::string help,
                double value);
void AddGauge(MetricFamilies* families, std::string name, std::string help,
              double value);

// One sample of a histogram family, from per-bucket (not cumulative) counts:
// counts has bounds.size() + 1 entries, the last one above every bound.
void AddHistogramSample(prometheus::MetricFamily& family, MetricLabels labels,
                        absl::Span<const double> bounds,
                        absl::Span<const uint64_t> counts, double sum);

// The exposition text (format 0.0.4) of the families.
std::string MetricsText(const MetricFamilies& families);
// The Content-Type of that text.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4";

// strata_build_info{program,version,build_type} 1.
void AddBuildInfo(MetricFamilies* families, const std::string& program);

// The standard process_* families of Prometheus's client libraries, read from
// /proc/self: CPU seconds, resident and virtual memory, open and maximum file
// descriptors, threads and start time.
void AddProcessMetrics(MetricFamilies* families);

// User + system CPU seconds process `pid` (0: this one) has used, from
// /proc/<pid>/stat; -1 when it cannot be read (no such process).
double ProcessCpuSeconds(int pid = 0);

// The q-quantile (0 < q < 1) of per-bucket counts (bounds.size() + 1 of
// them), interpolated linearly inside its bucket as Prometheus's
// histogram_quantile does: 0 without observations, the highest bound when
// it falls above every bound.
double HistogramQuantile(absl::Span<const double> bounds,
                         absl::Span<const uint64_t> counts, double q);

// A histogram that the hot path updates with relaxed atomics only. Bounds are
// upper bounds in increasing order and must outlive the histogram (static
// arrays). Thread-safe.
class AtomicHistogram {
 public:
  static constexpr size_t kMaxBounds = 15;
  // RPC latency in seconds, 50 us to 5 s.
  static constexpr std::array<double, 15> kLatencySeconds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    5.0};

  AtomicHistogram() : AtomicHistogram(absl::MakeConstSpan(kLatencySeconds)) {}
  explicit AtomicHistogram(absl::Span<const double> bounds);

  void Observe(double value);
  absl::Span<const double> bounds() const { return bounds_; }
  // Per-bucket counts, bounds().size() + 1 of them.
  std::vector<uint64_t> Counts() const;
  // Adds this histogram as one sample of `family`.
  void AddTo(prometheus::MetricFamily& family, MetricLabels labels) const;
  uint64_t count() const;

 private:
  const absl::Span<const double> bounds_;
  std::array<std::atomic<uint64_t>, kMaxBounds + 1> counts_{};
  // The sum in billionths, so that it adds without a compare-and-swap loop.
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace strata

#endif  // STRATA_COMMON_METRICS_H_
