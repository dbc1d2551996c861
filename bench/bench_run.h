#ifndef STRATA_BENCH_BENCH_RUN_H_
#define STRATA_BENCH_BENCH_RUN_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {
namespace bench {

// What to run; filled from the flags by strata_bench.cc.
struct BenchOptions {
  // load, pull, push, redis-load, redis-pull, redis-push, serving-lookup,
  // freshness
  std::string mode;
  std::vector<std::string> shards;
  std::string redis;  // host:port or unix:/path
  std::string tcp;    // tcp-pull: a ceiling-server's plain TCP host:port
  std::string table;
  std::string optimizer;
  uint32_t dim = 64;
  uint64_t num_keys = 1000000;
  uint32_t batch = 8192;
  bool zipf = false;
  double zipf_s = 1.1;
  int threads = 1;
  int inflight = 1;
  double duration_s = 10;
  double warmup_s = 1;
  bool fp16 = false;
  // pull: answers in shared memory from shards at loopback addresses.
  bool shared_memory_pull = true;
  uint64_t seed = 1;
  int timeout_ms = 10000;
  // Pre-built batches per thread, rounded up to a multiple of inflight.
  int pool_batches = 16;
  // serving-lookup and freshness: the strata-serving address.
  std::string serving;
  // serving-lookup: open-loop request rate; 0 keeps `inflight` outstanding.
  double qps = 0;
  // serving-lookup: AdaptiveThrottle's k for local refusals; 0: none.
  double client_throttle_k = 0;
  // serving-lookup: bound the lookups in flight by an
  // AdaptiveConcurrencyLimit, refusing the rest locally.
  bool client_concurrency_limit = false;
  // freshness: background push load on the training shards.
  double push_keys_per_s = 100000;
  // Processes on this machine (the servers) whose CPU time over the
  // measured window is reported next to the client's.
  std::vector<int> server_pids;

  // Load modes write every key once instead of running for a duration.
  bool is_load() const { return mode == "load" || mode == "redis-load"; }
  size_t bytes_per_value() const { return fp16 ? 2 : 4; }
};

// Latencies need a monotonic clock; common/clock.h's Clock reads absl::Now()
// (wall time) and exists to be faked in tests, which a load generator is not.
using SteadyClock = std::chrono::steady_clock;

// What one thread (or, merged, the whole run) measured.
struct RunResult {
  uint64_t requests = 0;
  uint64_t keys = 0;
  // Per counted request, in nanoseconds.
  std::vector<int64_t> latencies_ns;
  // Failed requests by status code name ("UNAVAILABLE", "NOT_FOUND", ...).
  std::map<std::string, uint64_t> errors;
  // The message of the first failure, to show next to the counts.
  std::string first_error;
  // Length of the measured window.
  double seconds = 0;
  // User + system CPU seconds over the measured window of this process
  // (every client thread) and of BenchOptions::server_pids together; < 0
  // when they could not be read.
  double client_cpu_seconds = -1;
  double server_cpu_seconds = -1;
  // Pull answers taken from shared memory (over the whole run).
  uint64_t shared_answers = 0;

  void AddError(const std::string& code, const std::string& message);

  void Merge(const RunResult& other);
};

// Decides which completions count: those inside [begin, end) of the
// measured window, which starts after the warmup. Load runs count every
// completion and have no end. Thread-compatible (one per thread).
class Window {
 public:
  Window(const BenchOptions& options, SteadyClock::time_point start);

  // Whether threads should stop issuing requests.
  bool Over(SteadyClock::time_point now) const;
  bool open_ended() const { return open_ended_; }
  SteadyClock::time_point begin() const { return begin_; }
  SteadyClock::time_point end() const { return end_; }
  // Records a successful request issued at `issued`, done at `done`.
  void Complete(SteadyClock::time_point issued, SteadyClock::time_point done,
                uint64_t keys, RunResult& result) const;

 private:
  bool open_ended_;
  SteadyClock::time_point begin_;
  SteadyClock::time_point end_;
};

// `count` batches of up to options.batch distinct keys in 0..num_keys-1,
// drawn uniformly or from Zipf(zipf_s), reproducible from (seed, thread).
// Duplicates are dropped, as PsClient drops them before sending.
std::vector<std::vector<uint64_t>> MakeKeyBatches(const BenchOptions& options,
                                                  int thread, size_t count);

// dim numbers in [-0.01, 0.01], the row or gradient every request carries.
std::vector<float> MakeRow(const BenchOptions& options);

// Batches of the pool per thread: pool_batches rounded up to a multiple of
// inflight, so that request slot i only ever uses entries i, i + inflight,
// ... and never touches a request another slot has in flight.
size_t PoolSize(const BenchOptions& options);

// Starts the measuring window, runs run(t, window) for t in 0..count-1 on
// as many threads, and merges their results. `seconds` is the window's length,
// or for load runs the time they took; the CPU seconds are read at the
// window's start and end.
RunResult RunThreads(
    const BenchOptions& options, size_t count,
    const std::function<RunResult(size_t, const Window&)>& run);

// Prints the one-line summary on stdout, then, with `json`, one JSON object.
void PrintReport(const BenchOptions& options, const RunResult& result,
                 bool json);

// The drivers. Each runs options.threads threads and merges their results;
// an error is a setup failure (cannot connect, table missing, ...).
absl::StatusOr<RunResult> RunStrata(const BenchOptions& options);
absl::StatusOr<RunResult> RunRedis(const BenchOptions& options);
absl::StatusOr<RunResult> RunServingLookup(const BenchOptions& options);
// The transport ceiling (bench/ceiling.cc): serves until SIGTERM, writing
// its ports to the files given (when not empty).
absl::Status RunCeilingServer(const BenchOptions& options,
                              const std::string& port_file,
                              const std::string& tcp_port_file);
absl::StatusOr<RunResult> RunTcpPull(const BenchOptions& options);
// Latencies are the times from push acknowledgement to visibility at serving.
absl::StatusOr<RunResult> RunFreshness(const BenchOptions& options);

}  // namespace bench
}  // namespace strata

#endif  // STRATA_BENCH_BENCH_RUN_H_
