#include "server/request_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {
namespace {

const char* CodeName(size_t code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code < 17 ? kNames[code] : "UNKNOWN";
}

}  // namespace

const char* RequestMetrics::MethodName(ShardMethod method) {
  switch (method) {
    case ShardMethod::kCreateTable:
      return "CreateTable";
    case ShardMethod::kListTables:
      return "ListTables";
    case ShardMethod::kPull:
      return "Pull";
    case ShardMethod::kPush:
      return "Push";
    case ShardMethod::kCheckpoint:
      return "Checkpoint";
    case ShardMethod::kRestore:
      return "Restore";
    case ShardMethod::kStats:
      return "Stats";
    case ShardMethod::kSubscribe:
      return "Subscribe";
    case ShardMethod::kCount:
      break;
  }
  return "unknown";
}

void RequestMetrics::Record(ShardMethod method, absl::StatusCode code,
                            absl::Duration latency) {
  const size_t m = static_cast<size_t>(method);
  const size_t c = static_cast<size_t>(code) < kCodes
                       ? static_cast<size_t>(code)
                       : static_cast<size_t>(absl::StatusCode::kUnknown);
  counts_[m][c].fetch_add(1, std::memory_order_relaxed);
  const double seconds = absl::ToDoubleSeconds(latency);
  size_t bucket = 0;
  while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) {
    ++bucket;
  }
  latency_buckets_[m][bucket].fetch_add(1, std::memory_order_relaxed);
  latency_sum_micros_[m].fetch_add(
      static_cast<uint64_t>(absl::ToInt64Microseconds(latency)),
      std::memory_order_relaxed);
}

uint64_t RequestMetrics::requests(ShardMethod method) const {
  uint64_t total = 0;
  for (const auto& count : counts_[static_cast<size_t>(method)]) {
    total += count.load(std::memory_order_relaxed);
  }
  return total;
}

uint64_t RequestMetrics::failed_requests() const {
  uint64_t total = 0;
  for (const auto& method : counts_) {
    for (size_t c = 1; c < kCodes; ++c) {
      total += method[c].load(std::memory_order_relaxed);
    }
  }
  return total;
}

std::string RequestMetrics::PrometheusText() const {
  std::string out =
      "# HELP strata_server_requests_total RPCs handled, by method and "
      "status code.\n# TYPE strata_server_requests_total counter\n";
  for (size_t m = 0; m < kMethods; ++m) {
    for (size_t c = 0; c < kCodes; ++c) {
      const uint64_t n = counts_[m][c].load(std::memory_order_relaxed);
      if (n == 0 && c != 0) continue;
      absl::StrAppend(&out, "strata_server_requests_total{method=\"",
                      MethodName(static_cast<ShardMethod>(m)), "\",code=\"",
                      CodeName(c), "\"} ", n, "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP strata_server_request_duration_seconds RPC latency "
                  "by method.\n# TYPE strata_server_request_duration_seconds "
                  "histogram\n");
  for (size_t m = 0; m < kMethods; ++m) {
    const char* name = MethodName(static_cast<ShardMethod>(m));
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kLatencyBounds.size(); ++b) {
      cumulative += latency_buckets_[m][b].load(std::memory_order_relaxed);
      const std::string bound = b < kLatencyBounds.size()
                                    ? absl::StrFormat("%g", kLatencyBounds[b])
                                    : "+Inf";
      absl::StrAppend(&out,
                      "strata_server_request_duration_seconds_bucket{method=\"",
                      name, "\",le=\"", bound, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(
        &out, "strata_server_request_duration_seconds_sum{method=\"", name,
        "\"} ", absl::StrFormat("%.6f", latency_sum_micros_[m].load() / 1e6),
        "\n", "strata_server_request_duration_seconds_count{method=\"", name,
        "\"} ", cumulative, "\n");
  }
  absl::StrAppend(
      &out,
      "# HELP strata_server_keys_pulled_total Keys answered by Pull.\n"
      "# TYPE strata_server_keys_pulled_total counter\n"
      "strata_server_keys_pulled_total ",
      keys_pulled(),
      "\n# HELP strata_server_keys_pushed_total Keys updated by Push.\n"
      "# TYPE strata_server_keys_pushed_total counter\n"
      "strata_server_keys_pushed_total ",
      keys_pushed(),
      "\n# HELP strata_server_duplicate_pushes_total Retried pushes "
      "acknowledged without being applied again.\n"
      "# TYPE strata_server_duplicate_pushes_total counter\n"
      "strata_server_duplicate_pushes_total ",
      duplicate_pushes(), "\n");
  return out;
}

}  // namespace strata
