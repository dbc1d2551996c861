#include "bench/bench_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/zipf_sampler.h"
#include "common/hash.h"
#include "common/metrics.h"
#include "tools/json_writer.h"

namespace strata {
namespace bench {

void RunResult::Merge(const RunResult& other) {
  requests += other.requests;
  keys += other.keys;
  latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(),
                      other.latencies_ns.end());
  for (const auto& [code, count] : other.errors) errors[code] += count;
  if (first_error.empty()) first_error = other.first_error;
  shared_answers += other.shared_answers;
}

void RunResult::AddError(const std::string& code, const std::string& message) {
  ++errors[code];
  if (first_error.empty()) first_error = absl::StrCat(code, ": ", message);
}

Window::Window(const BenchOptions& options, SteadyClock::time_point start)
    : open_ended_(options.is_load()) {
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(s));
  };
  begin_ = open_ended_ ? start : start + seconds(options.warmup_s);
  end_ = begin_ + seconds(options.duration_s);
}

bool Window::Over(SteadyClock::time_point now) const {
  return !open_ended_ && now >= end_;
}

void Window::Complete(SteadyClock::time_point issued,
                      SteadyClock::time_point done, uint64_t keys,
                      RunResult& result) const {
  if (done < begin_ || (!open_ended_ && done >= end_)) return;
  ++result.requests;
  result.keys += keys;
  result.latencies_ns.push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(done - issued)
          .count());
}

std::vector<std::vector<uint64_t>> MakeKeyBatches(const BenchOptions& options,
                                                  int thread, size_t count) {
  std::mt19937_64 engine(Mix64(options.seed ^ Mix64(thread + 1)));
  std::uniform_int_distribution<uint64_t> uniform(0, options.num_keys - 1);
  const ZipfSampler zipf(options.num_keys, options.zipf_s);
  std::vector<std::vector<uint64_t>> batches(count);
  for (std::vector<uint64_t>& batch : batches) {
    absl::flat_hash_set<uint64_t> seen;
    batch.reserve(options.batch);
    for (uint32_t i = 0; i < options.batch; ++i) {
      const uint64_t key = options.zipf ? zipf.Sample(engine) : uniform(engine);
      if (seen.insert(key).second) batch.push_back(key);
    }
  }
  return batches;
}

std::vector<float> MakeRow(const BenchOptions& options) {
  std::mt19937_64 engine(Mix64(options.seed));
  std::uniform_real_distribution<float> value(-0.01f, 0.01f);
  std::vector<float> row(options.dim);
  for (float& v : row) v = value(engine);
  return row;
}

size_t PoolSize(const BenchOptions& options) {
  const size_t inflight = static_cast<size_t>(options.inflight);
  const size_t wanted = std::max<size_t>(options.pool_batches, 1);
  return (wanted + inflight - 1) / inflight * inflight;
}

namespace {

// Nearest-rank percentile of sorted latencies, in milliseconds.
double PercentileMs(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index =
      std::min(sorted.size() - 1, static_cast<size_t>(std::max(rank, 1.0)) - 1);
  return static_cast<double>(sorted[index]) / 1e6;
}

}  // namespace

namespace {

// This process's and the servers' CPU seconds, read together.
struct CpuSample {
  double client = -1;
  double servers = -1;
};

CpuSample SampleCpu(const BenchOptions& options) {
  CpuSample sample;
  sample.client = ProcessCpuSeconds(0);
  if (options.server_pids.empty()) return sample;
  sample.servers = 0;
  for (int pid : options.server_pids) {
    const double seconds = ProcessCpuSeconds(pid);
    if (seconds < 0) return CpuSample{sample.client, -1};
    sample.servers += seconds;
  }
  return sample;
}

double Used(double before, double after) {
  return before < 0 || after < 0 ? -1 : after - before;
}

// CPU seconds per million keys of a run; -1 where not measured.
struct CpuPerMillionKeys {
  double client = -1;
  double servers = -1;
  double total = -1;  // client + servers
};

CpuPerMillionKeys CpuPerMillion(const RunResult& result) {
  CpuPerMillionKeys cpu;
  if (result.keys == 0) return cpu;
  const double per_million = 1e6 / static_cast<double>(result.keys);
  if (result.client_cpu_seconds >= 0) {
    cpu.client = result.client_cpu_seconds * per_million;
  }
  if (result.server_cpu_seconds >= 0) {
    cpu.servers = result.server_cpu_seconds * per_million;
  }
  if (cpu.client >= 0 && cpu.servers >= 0) cpu.total = cpu.client + cpu.servers;
  return cpu;
}

// " cpu_s/Mkeys=..." of the summary line, with what was measured.
std::string CpuText(const CpuPerMillionKeys& cpu) {
  if (cpu.client < 0) return "";
  if (cpu.servers < 0) {
    return absl::StrFormat(" cpu_s/Mkeys=%.3f(client)", cpu.client);
  }
  return absl::StrFormat(" cpu_s/Mkeys=%.3f(client %.3f + servers %.3f)",
                         cpu.total, cpu.client, cpu.servers);
}

}  // namespace

void PrintReport(const BenchOptions& options, const RunResult& result,
                 bool json) {
  std::vector<int64_t> sorted = result.latencies_ns;
  std::sort(sorted.begin(), sorted.end());
  const double seconds = result.seconds > 0 ? result.seconds : 1e-9;
  const double keys_per_s = static_cast<double>(result.keys) / seconds;
  const double mb_per_s = keys_per_s * options.dim *
                          static_cast<double>(options.bytes_per_value()) / 1e6;
  const CpuPerMillionKeys cpu = CpuPerMillion(result);
  const double quantiles[] = {0.5, 0.9, 0.99, 0.999};
  const char* names[] = {"p50", "p90", "p99", "p999"};
  uint64_t errors = 0;
  std::string error_text;
  for (const auto& [code, count] : result.errors) {
    errors += count;
    absl::StrAppend(&error_text, " ", code, "=", count);
  }
  std::string line = absl::StrFormat(
      "%s: requests=%d keys=%d seconds=%.2f keys/s=%.0f MB/s=%.1f%s "
      "latency_ms",
      options.mode, result.requests, result.keys, result.seconds, keys_per_s,
      mb_per_s, CpuText(cpu));
  for (int q = 0; q < 4; ++q) {
    absl::StrAppendFormat(&line, " %s=%.3f", names[q],
                          PercentileMs(sorted, quantiles[q]));
  }
  absl::StrAppendFormat(
      &line,
      " errors=%d%s (batch=%d dim=%d inflight=%d threads=%d dist=%s%s "
      "encoding=%s%s)",
      errors, error_text, options.batch, options.dim, options.inflight,
      options.threads, options.zipf ? "zipf" : "uniform",
      options.zipf ? absl::StrCat(" zipf_s=", options.zipf_s) : "",
      options.fp16 ? "float16" : "float32",
      result.shared_answers > 0
          ? absl::StrCat(" shared_memory_answers=", result.shared_answers)
          : "");
  std::printf("%s\n", line.c_str());
  if (!result.first_error.empty()) {
    std::fprintf(stderr, "strata-bench: first error: %s\n",
                 result.first_error.c_str());
  }
  if (json) {
    JsonWriter out;
    out.BeginObject();
    out.Key("mode").String(options.mode);
    out.Key("table").String(options.table);
    out.Key("dim").Uint(options.dim);
    out.Key("num_keys").Uint(options.num_keys);
    out.Key("batch").Uint(options.batch);
    out.Key("dist").String(options.zipf ? "zipf" : "uniform");
    out.Key("zipf_s").Double(options.zipf_s);
    out.Key("threads").Int(options.threads);
    out.Key("inflight").Int(options.inflight);
    out.Key("encoding").String(options.fp16 ? "float16" : "float32");
    out.Key("requests").Uint(result.requests);
    out.Key("keys").Uint(result.keys);
    out.Key("seconds").Double(result.seconds);
    out.Key("keys_per_s").Double(keys_per_s);
    out.Key("mb_per_s").Double(mb_per_s);
    out.Key("client_cpu_s_per_mkeys").Double(cpu.client);
    out.Key("server_cpu_s_per_mkeys").Double(cpu.servers);
    out.Key("cpu_s_per_mkeys").Double(cpu.total);
    out.Key("shared_memory_answers").Uint(result.shared_answers);
    out.Key("latency_ms").BeginObject();
    for (int q = 0; q < 4; ++q) {
      out.Key(names[q]).Double(PercentileMs(sorted, quantiles[q]));
    }
    out.EndObject();
    out.Key("errors").BeginObject();
    for (const auto& [code, count] : result.errors) out.Key(code).Uint(count);
    out.EndObject();
    out.EndObject();
    std::printf("%s\n", out.text().c_str());
  }
  std::fflush(stdout);
}

RunResult RunThreads(
    const BenchOptions& options, size_t count,
    const std::function<RunResult(size_t, const Window&)>& run) {
  const SteadyClock::time_point start = SteadyClock::now();
  const Window window(options, start);
  CpuSample before, after;
  std::thread cpu_sampler;
  if (window.open_ended()) {
    before = SampleCpu(options);
  } else {
    // Read at the window's edges, so that warm-up and drain are left out.
    cpu_sampler = std::thread([&] {
      std::this_thread::sleep_until(window.begin());
      before = SampleCpu(options);
      std::this_thread::sleep_until(window.end());
      after = SampleCpu(options);
    });
  }
  std::vector<RunResult> results(count);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < count; ++t) {
    threads.emplace_back([&, t] { results[t] = run(t, window); });
  }
  for (std::thread& thread : threads) thread.join();
  if (cpu_sampler.joinable()) {
    cpu_sampler.join();
  } else {
    after = SampleCpu(options);
  }
  RunResult merged;
  for (const RunResult& result : results) merged.Merge(result);
  merged.client_cpu_seconds = Used(before.client, after.client);
  merged.server_cpu_seconds = Used(before.servers, after.servers);
  merged.seconds =
      options.is_load()
          ? std::chrono::duration<double>(SteadyClock::now() - start).count()
          : options.duration_s;
  return merged;
}

}  // namespace bench
}  // namespace strata
