#ifndef STRATA_SERVER_REQUEST_METRICS_H_
#define STRATA_SERVER_REQUEST_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace strata {

// The RPCs a shard counts.
enum class ShardMethod {
  kCreateTable,
  kListTables,
  kPull,
  kPush,
  kCheckpoint,
  kRestore,
  kStats,
  kSubscribe,
  kGetShardMap,
  kSetShardMap,
  kMoveBuckets,
  kCount,  // Not a method: the number of them.
};

// Request counters by method and status code, a latency histogram per
// method, and key counters. Lock-free; thread-safe.
class RequestMetrics {
 public:
  void Record(ShardMethod method, absl::StatusCode code,
              absl::Duration latency);
  void AddKeysPulled(uint64_t n) { keys_pulled_ += n; }
  void AddKeysPushed(uint64_t n) { keys_pushed_ += n; }
  void AddDuplicatePush() { ++duplicate_pushes_; }
  void AddSharedAnswer() { ++shared_answers_; }
  void AddSharedAnswerRefusal() { ++shared_answer_refusals_; }

  uint64_t requests(ShardMethod method) const;
  const AtomicHistogram& latency(ShardMethod method) const {
    return latency_[static_cast<size_t>(method)];
  }
  uint64_t failed_requests() const;
  uint64_t keys_pulled() const { return keys_pulled_; }
  uint64_t keys_pushed() const { return keys_pushed_; }
  uint64_t duplicate_pushes() const { return duplicate_pushes_; }
  uint64_t shared_answers() const { return shared_answers_; }
  uint64_t shared_answer_refusals() const { return shared_answer_refusals_; }

  // The families of the counters above: strata_server_requests_total,
  // strata_server_request_duration_seconds, strata_server_keys_*_total and
  // strata_server_duplicate_pushes_total, and the pulls answered in a
  // client's shared memory or refused it
  // (strata_server_shared_memory_answers_total, ..._refusals_total).
  void AddMetrics(MetricFamilies* families) const;

  static const char* MethodName(ShardMethod method);

 private:
  static constexpr size_t kMethods = static_cast<size_t>(ShardMethod::kCount);
  static constexpr size_t kCodes = 17;

  std::array<std::array<std::atomic<uint64_t>, kCodes>, kMethods> counts_{};
  std::array<AtomicHistogram, kMethods> latency_{};
  std::atomic<uint64_t> keys_pulled_{0};
  std::atomic<uint64_t> keys_pushed_{0};
  std::atomic<uint64_t> duplicate_pushes_{0};
  std::atomic<uint64_t> shared_answers_{0};
  std::atomic<uint64_t> shared_answer_refusals_{0};
};

}  // namespace strata

#endif  // STRATA_SERVER_REQUEST_METRICS_H_
