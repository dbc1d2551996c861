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
  // Lookups are received, served and answered by `request_threads` threads
  // (0: the machine's cores) polling the server's completion queue: no
  // hand-over between threads on a lookup's path. A thread takes every
  // lookup that has arrived before serving the oldest waiting one, so those
  // past `max_queued_requests` waiting are refused (RESOURCE_EXHAUSTED) as
  // they arrive; one whose deadline passed while it waited is dropped
  // unprocessed (DEADLINE_EXCEEDED). Defaults: 0, 64.
  int request_threads = 0;
  size_t max_queued_requests = 64;
  // Also refused while the oldest waiting lookup has waited longer than
  // this; zero: no such bound. Default: zero.
  absl::Duration max_queue_wait = absl::ZeroDuration();
  // Nice increment (0-19) of the request threads. Default: 0.
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
// its port. Every call (Lookup, Status and grpc.health.v1.Health/Check,
// which replaces gRPC's own health service) is served through the
// asynchronous API by the service's request threads, which poll the
// server's completion queue (ServingServiceOptions::request_threads): a
// callback method anywhere in the server would start gRPC's threads for
// callbacks, and they poll the sockets too, taking lookups from the request
// threads and handing them over at the cost of a context switch each. For
// the same reason the process should use gRPC's "poll" poller
// (GRPC_POLL_STRATEGY, which strata-serving's main sets): with epoll1 every
// thread waiting on any completion queue polls these sockets as well.
// Requests are parsed from raw bytes, so that one that does not parse gets
// INVALID_ARGUMENT naming the method. Thread-safe.
//
// Example:
//   ServingService service(options);
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   service.ConfigureServer(builder);
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   service.StartRequestThreads();
//   ...
//   server->Shutdown();  // Before the service is destroyed.
class ServingService final : public v1::ServingService::WithRawMethod_Lookup<
                                 v1::ServingService::WithRawMethod_Status<
                                     v1::ServingService::Service>> {
 public:
  explicit ServingService(const ServingServiceOptions& options);
  // Stops the request threads; the server must have been shut down.
  ~ServingService() override;

  // Before the server starts: registers the health service in place of
  // gRPC's and adds the request threads' completion queue.
  void ConfigureServer(grpc::ServerBuilder& builder);
  // Starts the request threads; once the server has started.
  void StartRequestThreads();

  // The domain logic of each RPC, without gRPC; public for tests.
  // NOT_FOUND for an unknown table, INVALID_ARGUMENT for no keys or more
  // than max_keys_per_request. Writes the answer's wire bytes to
  // `response`.
  absl::Status DoLookup(const v1::LookupRequest& request,
                        grpc::ByteBuffer* response);
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

  struct Call;
  class HealthService;
  class RequestThreads;

  void Record(Method method, absl::StatusCode code, absl::Duration latency);
  // OK unless reads need the token and the call lacks it.
  absl::Status AuthorizeRead(const grpc::ServerContextBase& context,
                             Method method) const;
  // Parse a request and serve it into `response`.
  absl::Status ServeLookup(const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response);
  absl::Status ServeStatus(const grpc::ServerContextBase& context,
                           const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response);

  const ServingServiceOptions options_;
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kMethods> requests_{};
  std::array<AtomicHistogram, kMethods> latency_{};
  // Counters: lookups, keys, missing keys; histogram: lookup latency;
  // gauge: the largest lag of a followed shard.
  RateHistory traffic_{{absl::MakeConstSpan(AtomicHistogram::kLatencySeconds)}};
  std::atomic<uint64_t> keys_{0};
  std::atomic<uint64_t> missing_keys_{0};
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<RequestThreads> request_threads_;
};

}  // namespace strata

#endif  // STRATA_SERVING_SERVING_SERVICE_H_
