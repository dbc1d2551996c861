#ifndef STRATA_SERVER_REQUEST_METRICS_H_
#define STRATA_SERVER_REQUEST_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

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
  kCount,  // Not a method: the number of them.
};

// Request counters by method and status code, a latency histogram per
// method, and key counters. Lock-free; thread-safe.
class RequestMetrics {
 public:
  // Upper bounds of the latency buckets, in seconds.
  static constexpr std::array<double, 12> kLatencyBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
      0.01,   0.025,   0.05,   0.1,   0.5,    2.5};

  void Record(ShardMethod method, absl::StatusCode code,
              absl::Duration latency);
  void AddKeysPulled(uint64_t n) { keys_pulled_ += n; }
  void AddKeysPushed(uint64_t n) { keys_pushed_ += n; }
  void AddDuplicatePush() { ++duplicate_pushes_; }

  uint64_t requests(ShardMethod method) const;
  uint64_t failed_requests() const;
  uint64_t keys_pulled() const { return keys_pulled_; }
  uint64_t keys_pushed() const { return keys_pushed_; }
  uint64_t duplicate_pushes() const { return duplicate_pushes_; }

  // Prometheus text exposition of the counters above.
  std::string PrometheusText() const;

  static const char* MethodName(ShardMethod method);

 private:
  static constexpr size_t kMethods = static_cast<size_t>(ShardMethod::kCount);
  static constexpr size_t kCodes = 17;

  std::array<std::array<std::atomic<uint64_t>, kCodes>, kMethods> counts_{};
  std::array<std::array<std::atomic<uint64_t>, kLatencyBounds.size() + 1>,
             kMethods>
      latency_buckets_{};
  std::array<std::atomic<uint64_t>, kMethods> latency_sum_micros_{};
  std::atomic<uint64_t> keys_pulled_{0};
  std::atomic<uint64_t> keys_pushed_{0};
  std::atomic<uint64_t> duplicate_pushes_{0};
};

}  // namespace strata

#endif  // STRATA_SERVER_REQUEST_METRICS_H_
