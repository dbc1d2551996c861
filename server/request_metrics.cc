#include "server/request_metrics.h"

namespace strata {
namespace {}  // namespace

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
    case ShardMethod::kGetShardMap:
      return "GetShardMap";
    case ShardMethod::kSetShardMap:
      return "SetShardMap";
    case ShardMethod::kMoveBuckets:
      return "MoveBuckets";
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
  latency_[m].Observe(absl::ToDoubleSeconds(latency));
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

void RequestMetrics::AddMetrics(MetricFamilies* families) const {
  prometheus::MetricFamily& requests =
      AddFamily(families, "strata_server_requests_total",
                "RPCs handled, by method and status code.",
                prometheus::MetricType::Counter);
  for (size_t m = 0; m < kMethods; ++m) {
    for (size_t c = 0; c < kCodes; ++c) {
      const uint64_t n = counts_[m][c].load(std::memory_order_relaxed);
      if (n == 0 && c != 0) continue;
      AddSample(requests,
                {{"method", MethodName(static_cast<ShardMethod>(m))},
                 {"code",
                  absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}},
                static_cast<double>(n));
    }
  }
  prometheus::MetricFamily& latency =
      AddFamily(families, "strata_server_request_duration_seconds",
                "RPC latency by method, from the call's arrival to its answer.",
                prometheus::MetricType::Histogram);
  for (size_t m = 0; m < kMethods; ++m) {
    latency_[m].AddTo(latency,
                      {{"method", MethodName(static_cast<ShardMethod>(m))}});
  }
  AddCounter(families, "strata_server_keys_pulled_total",
             "Keys answered by Pull.", static_cast<double>(keys_pulled()));
  AddCounter(families, "strata_server_keys_pushed_total",
             "Keys updated by Push.", static_cast<double>(keys_pushed()));
  AddCounter(families, "strata_server_duplicate_pushes_total",
             "Retried pushes acknowledged without being applied again.",
             static_cast<double>(duplicate_pushes()));
  AddCounter(families, "strata_server_shared_memory_answers_total",
             "Pulls answered in the shared memory of a client on this "
             "machine instead of the gRPC message.",
             static_cast<double>(shared_answers()));
  AddCounter(families, "strata_server_shared_memory_refusals_total",
             "Pulls that offered shared memory the shard could not use "
             "(answered over gRPC; the client stops offering it).",
             static_cast<double>(shared_answer_refusals()));
}

}  // namespace strata
