// strata-bench: load generator for a Strata cluster, and for Redis as a
// baseline.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_run.h"
#include "common/command_line.h"
#include "common/metrics.h"
#include "common/system_memory.h"
#include "proto/strata.pb.h"

ABSL_FLAG(std::string, mode, "",
          "load, pull or push against --shards; redis-load, redis-pull or "
          "redis-push against --redis; serving-lookup against --serving; "
          "freshness against --shards and --serving; ceiling-server serves "
          "the transport ceiling (Pull from cached answers over gRPC, and "
          "rows from a preallocated buffer over plain TCP); tcp-pull pulls "
          "from its --tcp port (required).");
ABSL_FLAG(std::string, tcp, "",
          "tcp-pull: host:port of a ceiling-server's plain TCP port.");
ABSL_FLAG(std::string, port_file, "",
          "ceiling-server: file to write its gRPC port to.");
ABSL_FLAG(std::string, tcp_port_file, "",
          "ceiling-server: file to write its plain TCP port to.");
ABSL_FLAG(std::string, shards, "",
          "Comma-separated host:port of every shard, in shard-index order.");
ABSL_FLAG(std::string, redis, "127.0.0.1:6379",
          "Redis for the redis-* modes: host:port or unix:/path.");
ABSL_FLAG(std::string, table, "bench", "Table to use.");
ABSL_FLAG(int64_t, dim, 64, "Row dimension.");
ABSL_FLAG(std::string, optimizer, "adagrad",
          "load: optimizer of the table when it has to be created "
          "(sgd, adagrad, adam or ftrl).");
ABSL_FLAG(int64_t, num_keys, 1000000, "Keys 0..num_keys-1 are used.");
ABSL_FLAG(int64_t, batch, 8192,
          "Keys drawn per request; duplicates are dropped before sending, as "
          "PsClient does, and only keys sent are counted.");
ABSL_FLAG(std::string, dist, "uniform", "Key distribution: uniform or zipf.");
ABSL_FLAG(double, zipf_s, 1.1, "Exponent of --dist=zipf; key 0 is hottest.");
ABSL_FLAG(int, threads, 1, "Client threads, each with its own connections.");
ABSL_FLAG(int, inflight, 1,
          "Requests kept in flight per thread, 1..64 (pipelined commands for "
          "Redis).");
ABSL_FLAG(std::string, serving, "",
          "serving-lookup and freshness: host:port of strata-serving.");
ABSL_FLAG(double, qps, 0,
          "serving-lookup: open-loop requests per second (latency counted "
          "from each request's scheduled start); 0 runs closed loop with "
          "--inflight requests outstanding.");
ABSL_FLAG(double, client_throttle_k, 0,
          "serving-lookup: throttle as ServingClient does (its throttle_k): "
          "once the server refuses for overload, send about this many "
          "requests per accepted one and refuse the rest locally (counted "
          "as THROTTLED); 0 sends every request.");
ABSL_FLAG(bool, client_concurrency_limit, false,
          "serving-lookup: bound the lookups in flight as ServingClient's "
          "adaptive_concurrency_limit does (it grows while answers come and "
          "shrinks when the server refuses for overload) and refuse the rest "
          "locally (counted as LIMITED); with --client_throttle_k, a lookup "
          "must pass both.");
ABSL_FLAG(double, push_keys_per_s, 100000,
          "freshness: keys pushed per second to the training shards, in "
          "pushes of --batch keys plus one probe key each.");
ABSL_FLAG(double, duration_s, 10, "Measured seconds (not for load modes).");
ABSL_FLAG(double, warmup_s, 1, "Seconds run before measuring starts.");
ABSL_FLAG(std::string, encoding, "float32",
          "Values on the wire: float32 or float16 (pulls, pushes and "
          "serving lookups; Redis rows are stored in it too).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the key draws and of the row values.");
ABSL_FLAG(int, timeout_ms, 10000, "Deadline of every request.");
ABSL_FLAG(int, pool_batches, 16,
          "Requests built per thread before the timed loop and reused in "
          "turn (rounded up to a multiple of --inflight).");
ABSL_FLAG(std::string, server_pids, "",
          "Comma-separated pids of the servers (on this machine) whose CPU "
          "seconds per million keys are reported next to the client's.");
ABSL_FLAG(bool, shared_memory_pull, true,
          "pull: offer each shard on this machine (a loopback address) "
          "shared memory for its answers, as PsClient does; false: every "
          "answer over gRPC.");
ABSL_FLAG(bool, json, false,
          "After the summary line, print one JSON object with the results.");

namespace strata {
namespace bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "strata-bench: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return kExitUsage;
}

bool IsRedisMode(const std::string& mode) {
  return mode == "redis-load" || mode == "redis-pull" || mode == "redis-push";
}

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions options;
  options.mode = absl::GetFlag(FLAGS_mode);
  if (options.mode != "load" && options.mode != "pull" &&
      options.mode != "push" && !IsRedisMode(options.mode) &&
      options.mode != "serving-lookup" && options.mode != "freshness" &&
      options.mode != "ceiling-server" && options.mode != "tcp-pull") {
    return absl::InvalidArgumentError(
        "--mode must be load, pull, push, redis-load, redis-pull, "
        "redis-push, serving-lookup, freshness, ceiling-server or tcp-pull");
  }
  options.tcp = absl::GetFlag(FLAGS_tcp);
  if (options.mode == "tcp-pull" && options.tcp.empty()) {
    return absl::InvalidArgumentError("--tcp is required");
  }
  options.shards =
      absl::StrSplit(absl::GetFlag(FLAGS_shards), ',', absl::SkipWhitespace());
  if (!IsRedisMode(options.mode) && options.mode != "serving-lookup" &&
      options.mode != "ceiling-server" && options.mode != "tcp-pull" &&
      options.shards.empty()) {
    return absl::InvalidArgumentError("--shards is required");
  }
  options.serving = absl::GetFlag(FLAGS_serving);
  if ((options.mode == "serving-lookup" || options.mode == "freshness") &&
      options.serving.empty()) {
    return absl::InvalidArgumentError("--serving is required");
  }
  options.qps = absl::GetFlag(FLAGS_qps);
  options.push_keys_per_s = absl::GetFlag(FLAGS_push_keys_per_s);
  if (options.qps < 0 || !(options.push_keys_per_s > 0)) {
    return absl::InvalidArgumentError(
        "--qps must be >= 0 and --push_keys_per_s > 0");
  }
  options.client_throttle_k = absl::GetFlag(FLAGS_client_throttle_k);
  options.client_concurrency_limit =
      absl::GetFlag(FLAGS_client_concurrency_limit);
  if (options.client_throttle_k != 0 && !(options.client_throttle_k >= 1)) {
    return absl::InvalidArgumentError(
        "--client_throttle_k must be 0 (off) or >= 1");
  }
  if (options.client_concurrency_limit && options.qps == 0) {
    // A closed loop already bounds what is in flight (--inflight).
    return absl::InvalidArgumentError(
        "--client_concurrency_limit needs an open loop (--qps > 0)");
  }
  options.redis = absl::GetFlag(FLAGS_redis);
  options.table = absl::GetFlag(FLAGS_table);
  if (options.table.empty()) {
    return absl::InvalidArgumentError("--table must not be empty");
  }
  options.optimizer = absl::AsciiStrToLower(absl::GetFlag(FLAGS_optimizer));
  v1::OptimizerType type;
  if (!v1::OptimizerType_Parse(absl::AsciiStrToUpper(options.optimizer),
                               &type) ||
      type == v1::OPTIMIZER_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "--optimizer must be sgd, adagrad, adam or ftrl");
  }
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const int64_t num_keys = absl::GetFlag(FLAGS_num_keys);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  if (dim < 1 || dim > 65536) {
    return absl::InvalidArgumentError("--dim must be in 1..65536");
  }
  if (num_keys < 1)
    return absl::InvalidArgumentError("--num_keys must be >= 1");
  if (batch < 1 || batch > (1 << 24)) {
    return absl::InvalidArgumentError("--batch must be in 1..16777216");
  }
  options.dim = static_cast<uint32_t>(dim);
  options.num_keys = static_cast<uint64_t>(num_keys);
  options.batch = static_cast<uint32_t>(batch);
  const std::string dist = absl::GetFlag(FLAGS_dist);
  if (dist != "uniform" && dist != "zipf") {
    return absl::InvalidArgumentError("--dist must be uniform or zipf");
  }
  options.zipf = dist == "zipf";
  options.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  if (!(options.zipf_s > 0)) {
    return absl::InvalidArgumentError("--zipf_s must be > 0");
  }
  options.threads = absl::GetFlag(FLAGS_threads);
  options.inflight = absl::GetFlag(FLAGS_inflight);
  if (options.threads < 1 || options.threads > 256) {
    return absl::InvalidArgumentError("--threads must be in 1..256");
  }
  if (options.inflight < 1 || options.inflight > 64) {
    return absl::InvalidArgumentError("--inflight must be in 1..64");
  }
  options.duration_s = absl::GetFlag(FLAGS_duration_s);
  options.warmup_s = absl::GetFlag(FLAGS_warmup_s);
  if (!(options.duration_s > 0) || !(options.warmup_s >= 0)) {
    return absl::InvalidArgumentError(
        "--duration_s must be > 0 and --warmup_s >= 0");
  }
  const std::string encoding = absl::GetFlag(FLAGS_encoding);
  if (encoding != "float32" && encoding != "float16") {
    return absl::InvalidArgumentError("--encoding must be float32 or float16");
  }
  options.fp16 = encoding == "float16";
  options.seed = absl::GetFlag(FLAGS_seed);
  options.shared_memory_pull = absl::GetFlag(FLAGS_shared_memory_pull);
  options.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  options.pool_batches = absl::GetFlag(FLAGS_pool_batches);
  if (options.timeout_ms < 1) {
    return absl::InvalidArgumentError("--timeout_ms must be >= 1");
  }
  if (options.pool_batches < 1 || options.pool_batches > 4096) {
    return absl::InvalidArgumentError("--pool_batches must be in 1..4096");
  }
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_server_pids),
                                               ',', absl::SkipWhitespace())) {
    int pid = 0;
    if (!absl::SimpleAtoi(text, &pid) || pid <= 0 ||
        ProcessCpuSeconds(pid) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--server_pids: \"", text, "\" is not a running process"));
    }
    options.server_pids.push_back(pid);
  }
  return options;
}

int Run(int argc, char** argv) {
  // Answers of up to megabytes arrive and are freed thousands of times a
  // second: under glibc's defaults a third of the generator's CPU per key
  // went to faulting their pages in again, CPU the server under test lost
  // on a small machine.
  KeepFreedMemoryForReuse();
  const std::vector<std::string> positional = ParseCommandLine(
      "Load generator for a Strata cluster, with Redis as a baseline.\n"
      "Example: strata-bench --shards=127.0.0.1:50051 --mode=pull "
      "--batch=8192 --inflight=8 --duration_s=5 --json",
      argc, argv);
  if (positional.size() > 1) {
    return UsageError(
        absl::StrCat("unexpected argument '", positional[1], "' (see --help)"));
  }
  absl::StatusOr<BenchOptions> options = OptionsFromFlags();
  if (!options.ok()) return UsageError(options.status().message());
  absl::StatusOr<RunResult> result;
  if (IsRedisMode(options->mode)) {
#ifdef STRATA_HAVE_HIREDIS
    result = RunRedis(*options);
#else
    return UsageError(
        "built without hiredis: the redis-* modes are unavailable (install "
        "libhiredis-dev and rebuild)");
#endif
  } else if (options->mode == "ceiling-server") {
    const absl::Status served =
        RunCeilingServer(*options, absl::GetFlag(FLAGS_port_file),
                         absl::GetFlag(FLAGS_tcp_port_file));
    if (served.ok()) return kExitOk;
    result = served;
  } else if (options->mode == "tcp-pull") {
    result = RunTcpPull(*options);
  } else if (options->mode == "serving-lookup") {
    result = RunServingLookup(*options);
  } else if (options->mode == "freshness") {
    result = RunFreshness(*options);
  } else {
    result = RunStrata(*options);
  }
  if (!result.ok()) {
    const std::string code = absl::StatusCodeToString(result.status().code());
    std::fprintf(stderr, "strata-bench: %s: %.*s\n", code.c_str(),
                 static_cast<int>(result.status().message().size()),
                 result.status().message().data());
    return kExitError;
  }
  PrintReport(*options, *result, absl::GetFlag(FLAGS_json));
  return result->errors.empty() ? kExitOk : kExitError;
}

}  // namespace
}  // namespace bench
}  // namespace strata

int main(int argc, char** argv) { return strata::bench::Run(argc, argv); }
