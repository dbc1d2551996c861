#include "common/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "prometheus/text_serializer.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif
#ifndef STRATA_BUILD_TYPE
#define STRATA_BUILD_TYPE "unknown"
#endif

namespace strata {
namespace {

std::vector<prometheus::ClientMetric::Label> ToLabels(MetricLabels labels) {
  std::vector<prometheus::ClientMetric::Label> out;
  out.reserve(labels.size());
  for (const auto& [name, value] : labels) out.push_back({name, value});
  return out;
}

// The fields of /proc/<pid>/stat (pid 0: this process) after the command
// name, which is in parentheses and may itself hold spaces; field 3 (state)
// comes first. Empty when the file cannot be read.
std::vector<std::string> ProcStatFields(int pid) {
  std::ifstream file(pid == 0 ? std::string("/proc/self/stat")
                              : absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(file, line);
  const size_t end_of_name = line.rfind(')');
  if (end_of_name == std::string::npos) return {};
  return absl::StrSplit(line.substr(end_of_name + 1), ' ', absl::SkipEmpty());
}

// Seconds since the epoch at which the machine booted (/proc/stat's btime).
double BootTimeSeconds() {
  std::ifstream file("/proc/stat");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("btime ", 0) == 0) {
      double seconds = 0;
      if (absl::SimpleAtod(line.substr(6), &seconds)) return seconds;
    }
  }
  return 0;
}

int OpenFileDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // Not the descriptor of the listing itself.
}

double Field(const std::vector<std::string>& fields, size_t stat_field) {
  // stat_field counts from 1 as in proc(5); fields[0] is field 3.
  double value = 0;
  if (stat_field < 3 || stat_field - 3 >= fields.size()) return 0;
  return absl::SimpleAtod(fields[stat_field - 3], &value) ? value : 0;
}

}  // namespace

prometheus::MetricFamily& AddFamily(MetricFamilies* families, std::string name,
                                    std::string help,
                                    prometheus::MetricType type) {
  prometheus::MetricFamily& family = families->emplace_back();
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddSample(prometheus::MetricFamily& family, MetricLabels labels,
               double value) {
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = ToLabels(labels);
  switch (family.type) {
    case prometheus::MetricType::Counter:
      metric.counter.value = value;
      break;
    case prometheus::MetricType::Gauge:
      metric.gauge.value = value;
      break;
    default:
      metric.untyped.value = value;
      break;
  }
}

void AddCounter(MetricFamilies* families, std::string name, std::string help,
                double value) {
  AddSample(AddFamily(families, std::move(name), std::move(help),
                      prometheus::MetricType::Counter),
            {}, value);
}

void AddGauge(MetricFamilies* families, std::string name, std::string help,
              double value) {
  AddSample(AddFamily(families, std::move(name), std::move(help),
                      prometheus::MetricType::Gauge),
            {}, value);
}

void AddHistogramSample(prometheus::MetricFamily& family, MetricLabels labels,
                        absl::Span<const double> bounds,
                        absl::Span<const uint64_t> counts, double sum) {
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = ToLabels(labels);
  uint64_t cumulative = 0;
  for (size_t b = 0; b < bounds.size() && b < counts.size(); ++b) {
    cumulative += counts[b];
    metric.histogram.bucket.push_back({cumulative, bounds[b]});
  }
  if (counts.size() > bounds.size()) cumulative += counts[bounds.size()];
  // The serializer adds the +Inf bucket with the sample count.
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = sum;
}

std::string MetricsText(const MetricFamilies& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void AddBuildInfo(MetricFamilies* families, const std::string& program) {
  AddSample(AddFamily(families, "strata_build_info",
                      "1, labelled with the program, version and build type.",
                      prometheus::MetricType::Gauge),
            {{"program", program},
             {"version", STRATA_VERSION},
             {"build_type", STRATA_BUILD_TYPE}},
            1);
}

double ProcessCpuSeconds(int pid) {
  const std::vector<std::string> stat = ProcStatFields(pid);
  if (stat.empty()) return -1;
  // proc(5): utime 14, stime 15, in clock ticks.
  return (Field(stat, 14) + Field(stat, 15)) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

void AddProcessMetrics(MetricFamilies* families) {
  const std::vector<std::string> stat = ProcStatFields(0);
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // proc(5): utime 14, stime 15, num_threads 20, starttime 22, vsize 23,
  // rss 24 (pages).
  AddCounter(families, "process_cpu_seconds_total",
             "User and system CPU time spent in seconds.",
             (Field(stat, 14) + Field(stat, 15)) / ticks);
  AddGauge(families, "process_resident_memory_bytes",
           "Resident memory size in bytes.", Field(stat, 24) * page);
  AddGauge(families, "process_virtual_memory_bytes",
           "Virtual memory size in bytes.", Field(stat, 23));
  AddGauge(families, "process_start_time_seconds",
           "Start time of the process since unix epoch in seconds.",
           BootTimeSeconds() + Field(stat, 22) / ticks);
  AddGauge(families, "process_threads", "Number of OS threads in the process.",
           Field(stat, 20));
  AddGauge(families, "process_open_fds", "Number of open file descriptors.",
           OpenFileDescriptors());
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    AddGauge(
        families, "process_max_fds", "Maximum number of open file descriptors.",
        limit.rlim_cur == RLIM_INFINITY ? INFINITY
                                        : static_cast<double>(limit.rlim_cur));
  }
}

AtomicHistogram::AtomicHistogram(absl::Span<const double> bounds)
    : bounds_(bounds.subspan(0, std::min(bounds.size(), kMaxBounds))) {}

void AtomicHistogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  if (value > 0) {
    sum_nanos_.fetch_add(static_cast<uint64_t>(std::llround(value * 1e9)),
                         std::memory_order_relaxed);
  }
}

void AtomicHistogram::AddTo(prometheus::MetricFamily& family,
                            MetricLabels labels) const {
  AddHistogramSample(
      family, labels, bounds_, Counts(),
      static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) / 1e9);
}

std::vector<uint64_t> AtomicHistogram::Counts() const {
  std::vector<uint64_t> counts(bounds_.size() + 1);
  for (size_t b = 0; b < counts.size(); ++b) {
    counts[b] = counts_[b].load(std::memory_order_relaxed);
  }
  return counts;
}

double HistogramQuantile(absl::Span<const double> bounds,
                         absl::Span<const uint64_t> counts, double q) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0 || bounds.empty()) return 0;
  const double rank = q * static_cast<double>(total);
  double below = 0;
  for (size_t b = 0; b < bounds.size() && b < counts.size(); ++b) {
    const double in_bucket = static_cast<double>(counts[b]);
    if (below + in_bucket >= rank && in_bucket > 0) {
      const double lower = b == 0 ? 0 : bounds[b - 1];
      return lower + (bounds[b] - lower) * (rank - below) / in_bucket;
    }
    below += in_bucket;
  }
  return bounds.back();
}

uint64_t AtomicHistogram::count() const {
  uint64_t total = 0;
  for (uint64_t c : Counts()) total += c;
  return total;
}

}  // namespace strata
