#ifndef STRATA_SERVING_SERVING_SERVICE_H_
#define STRATA_SERVING_SERVING_SERVICE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/daemon.h"
#include "common/metrics.h"
#include "common/rate_history.h"
#include "common/work_queue.h"
#include "proto/strata.grpc.pb.h"
#include "serving/serving_store.h"
#include "serving/shard_follower.h"

namespace strata {

struct ServingServiceOptions {
  // The rows served; not owned, must outlive the service. Required.
  ServingStore* store = nullptr;
  // "follow" or "offline", as Status reports it.
  std::string mode = "follow";
  // The state of each followed shard (or loaded checkpoint), in shard order.
  std::function<std::vector<FollowState>()> shards;
  // Keys in one Lookup. Default: 262144.
  uint64_t max_keys_per_request = 262144;
  // Bytes of values one Lookup may answer with (keys x dim x 4), checked
  // before anything is looked up. Default: 512 MiB less room for framing.
  uint64_t max_response_bytes = kMaxAnswerValueBytes;
  // Lookups wait for `request_threads` threads (0: the machine's cores) in
  // a queue of at most `max_queued_requests`; past it they are refused with
  // RESOURCE_EXHAUSTED at once, and one whose deadline passed while it
  // waited is dropped unprocessed (DEADLINE_EXCEEDED). Defaults: 0, 64.
  int request_threads = 0;
  size_t max_queued_requests = 64;
  // Also refused while the oldest waiting one has waited longer than this
  // (common/work_queue.h); zero: no such bound. Default: zero.
  absl::Duration max_queue_wait = absl::ZeroDuration();
  // Serve a lookup on gRPC's thread when no lookup waits and a request
  // thread's slot is free (common/work_queue.h). Default: false.
  bool serve_inline_when_idle = false;
  // Nice increment of the request threads, so that gRPC's threads, which
  // receive lookups and refuse the excess, come first on a loaded core
  // (WorkQueue::Options::thread_nice). Default: 0.
  int request_thread_nice = 0;
  // The bearer token that protected calls must carry; empty: no check.
  // Lookup and Status are reads: they need it only with auth_reads.
  std::string auth_token;
  bool auth_reads = false;
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
};

// The gRPC adapter of the serving PS (ServingService: Lookup, Status):
// read-only, so the training service's writes are not even registered on
// its port. Thread-safe.
class ServingService final
    : public v1::ServingService::WithRawCallbackMethod_Lookup<
          v1::ServingService::WithRawCallbackMethod_Status<
              v1::ServingService::CallbackService>> {
 public:
  explicit ServingService(const ServingServiceOptions& options);
  // Finishes the lookups still queued.
  ~ServingService() override;

  // Served raw (serialized bytes in and out), so that a request that does
  // not parse gets INVALID_ARGUMENT naming the method.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;

  // The domain logic of each RPC, without gRPC; public for tests.
  // NOT_FOUND for an unknown table, INVALID_ARGUMENT for no keys or more
  // than max_keys_per_request.
  absl::Status DoLookup(const v1::LookupRequest& request,
                        v1::LookupResponse& response);
  void DoStatus(v1::ServingStatusResponse& response);

  // The /metrics families of the requests (counts by code, latency
  // histograms), the followed shards and the tables.
  void AddMetrics(MetricFamilies* families);
  // The same as an HTML page (serving/status_page.h), with charts of the
  // samples SampleTraffic took.
  std::string StatusPage(int refresh_seconds);
  // Records the lookups, keys and latency since the last call and the
  // followed shards' largest lag: one point of the page's charts (called
  // every second).
  void SampleTraffic(absl::Time now);

 private:
  enum Method { kLookup, kStatus, kMethods };
  static constexpr size_t kCodes = 17;

  void Record(Method method, absl::StatusCode code, absl::Duration latency);
  // OK unless reads need the token and the call lacks it.
  absl::Status AuthorizeRead(grpc::CallbackServerContext* context,
                             Method method) const;

  const ServingServiceOptions options_;
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kMethods> requests_{};
  std::array<AtomicHistogram, kMethods> latency_{};
  // Counters: lookups, keys, missing keys; histogram: lookup latency;
  // gauge: the largest lag of a followed shard.
  RateHistory traffic_{{absl::MakeConstSpan(AtomicHistogram::kLatencySeconds)}};
  std::atomic<uint64_t> keys_{0};
  std::atomic<uint64_t> missing_keys_{0};
  // Last member: destroyed first, finishing the lookups it still holds.
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace strata

#endif  // STRATA_SERVING_SERVING_SERVICE_H_
