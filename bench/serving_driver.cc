// The serving side of strata-bench:
//  - serving-lookup: Lookup calls against strata-serving, closed loop
//    (`inflight` outstanding) or open loop at a fixed --qps, where latency is
//    measured from each request's scheduled start, so that a stalled server
//    is not hidden by the generator waiting for it;
//  - freshness: pushes to the training shards at --push_keys_per_s while
//    polling strata-serving, and measures the time from each push's
//    acknowledgement to its row being visible at serving.

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_run.h"
#include "client/ps_client.h"
#include "common/adaptive_concurrency_limit.h"
#include "common/adaptive_throttle.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace bench {
namespace {

std::shared_ptr<grpc::Channel> ServingChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

std::unique_ptr<v1::ServingService::Stub> ServingStub(
    const std::string& address) {
  return v1::ServingService::NewStub(ServingChannel(address));
}

// Lookups are sent as bytes serialized before the timed loop and answers
// kept as bytes: parsing 256 KB answers would take the generator's core
// and count its own delay as the server's latency.
constexpr char kLookupMethod[] = "/strata.v1.ServingService/Lookup";

struct LookupCall {
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::ByteBuffer response;
  grpc::Status status;
  SteadyClock::time_point scheduled;
  uint64_t keys = 0;
  // Its AdaptiveConcurrencyLimit ticket, when there is a limit.
  AdaptiveConcurrencyLimit::Ticket ticket;
};

// In-flight lookups; the closed loop's sender sleeps while `inflight` are
// out rather than spinning, which on a small machine would take the CPU
// that the server under test needs.
class Outstanding {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    --count_;
  }
  // Returns once fewer than `limit` are out.
  void WaitBelow(int64_t limit) {
    absl::MutexLock lock(&mu_);
    auto below = [this, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return count_ < limit;
    };
    mu_.Await(absl::Condition(&below));
  }

 private:
  absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends lookups until the window is over, closed loop or at options.qps,
// and reaps their answers on a second thread.
RunResult SendLookups(const BenchOptions& options,
                      const std::vector<grpc::ByteBuffer>& requests,
                      const std::vector<std::vector<uint64_t>>& batches,
                      const Window& window) {
  grpc::GenericStub stub(ServingChannel(options.serving));
  std::unique_ptr<AdaptiveThrottle> throttle;
  if (options.client_throttle_k > 0) {
    AdaptiveThrottle::Options throttle_options;
    throttle_options.k = options.client_throttle_k;
    throttle = std::make_unique<AdaptiveThrottle>(throttle_options);
  }
  std::unique_ptr<AdaptiveConcurrencyLimit> limit;
  if (options.client_concurrency_limit) {
    limit = std::make_unique<AdaptiveConcurrencyLimit>(
        AdaptiveConcurrencyLimit::Options());
  }
  grpc::CompletionQueue queue;
  RunResult result;
  Outstanding outstanding;
  // Reaps completions on its own thread, so that the sender keeps to its
  // schedule.
  std::thread reaper([&] {
    void* tag;
    bool ok;
    while (queue.Next(&tag, &ok)) {
      std::unique_ptr<LookupCall> call(static_cast<LookupCall*>(tag));
      const bool accepted = AcceptedByServer(
          static_cast<absl::StatusCode>(call->status.error_code()));
      if (throttle != nullptr) throttle->Record(accepted);
      if (limit != nullptr) limit->Release(call->ticket, accepted);
      if (call->status.ok() &&
          call->response.Length() <
              call->keys * options.dim * options.bytes_per_value()) {
        // Not parsed, but an answer too short to hold the rows is wrong.
        result.AddError("SHORT_ANSWER",
                        absl::StrCat("an answer of ", call->response.Length(),
                                     " bytes for ", call->keys, " rows"));
      } else if (call->status.ok()) {
        window.Complete(call->scheduled, SteadyClock::now(), call->keys,
                        result);
      } else {
        result.AddError(absl::StatusCodeToString(static_cast<absl::StatusCode>(
                            call->status.error_code())),
                        call->status.error_message());
      }
      outstanding.Done();
    }
  });
  const bool open_loop = options.qps > 0;
  const auto interval = std::chrono::nanoseconds(
      open_loop ? static_cast<int64_t>(1e9 / options.qps) : 0);
  // Attempts closer together than this share one wake-up: at 10x of a
  // server's capacity (tens of thousands a second, most refused by the
  // throttle) a sleep per attempt cost the generator two context switches
  // each. Latency still counts from each attempt's own time.
  constexpr auto kWakeUpEvery = std::chrono::microseconds(100);
  const auto oversleep = interval < kWakeUpEvery
                             ? std::chrono::nanoseconds(kWakeUpEvery)
                             : std::chrono::nanoseconds(0);
  SteadyClock::time_point next = SteadyClock::now();
  // The reaper owns `result` until it is joined.
  uint64_t throttled = 0, limited = 0;
  for (uint64_t i = 0;; ++i) {
    SteadyClock::time_point now = SteadyClock::now();
    if (window.Over(now)) break;
    if (open_loop) {
      if (now < next) std::this_thread::sleep_until(next + oversleep);
    } else {
      outstanding.WaitBelow(options.inflight);
    }
    if (throttle != nullptr && !throttle->Allow()) {
      // Refused here, as ServingClient would: the server never sees it.
      ++throttled;
      next += interval;
      continue;
    }
    std::optional<AdaptiveConcurrencyLimit::Ticket> ticket;
    if (limit != nullptr && !(ticket = limit->TryAcquire())) {
      ++limited;  // Beyond the limit: refused here too.
      next += interval;
      continue;
    }
    auto* call = new LookupCall();
    if (ticket.has_value()) call->ticket = *ticket;
    call->scheduled = open_loop ? next : SteadyClock::now();
    call->keys = static_cast<uint64_t>(batches[i % batches.size()].size());
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(options.timeout_ms));
    outstanding.Add();
    call->reader = stub.PrepareUnaryCall(&call->context, kLookupMethod,
                                         requests[i % requests.size()], &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
    next += interval;
  }
  outstanding.WaitBelow(1);
  queue.Shutdown();
  reaper.join();
  if (throttled > 0) result.errors["THROTTLED"] += throttled;
  if (limited > 0) result.errors["LIMITED"] += limited;
  return result;
}

}  // namespace

absl::StatusOr<RunResult> RunServingLookup(const BenchOptions& options) {
  const std::vector<std::vector<uint64_t>> batches =
      MakeKeyBatches(options, 0, PoolSize(options));
  std::vector<grpc::ByteBuffer> requests(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    v1::LookupRequest request;
    request.set_table(options.table);
    request.mutable_keys()->Add(batches[i].begin(), batches[i].end());
    if (options.fp16) request.set_encoding(v1::FLOAT16);
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    requests[i] = grpc::ByteBuffer(&slice, 1);
  }
  // One sender: RunThreads times the window and reads the CPU at its edges.
  return RunThreads(options, 1, [&](size_t, const Window& window) {
    return SendLookups(options, requests, batches, window);
  });
}

absl::StatusOr<RunResult> RunFreshness(const BenchOptions& options) {
  PsClientOptions client_options;
  client_options.shard_addresses = options.shards;
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(client_options);
  if (!client.ok()) return client.status();
  // Probe rows start at zero and become exactly 1 when their push lands.
  v1::TableConfig config;
  config.set_name(options.table);
  config.set_dim(options.dim);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  config.mutable_initializer()->set_type(v1::ZEROS);
  if (absl::Status s = (*client)->CreateTable(config); !s.ok()) return s;
  auto stub = ServingStub(options.serving);

  struct Probe {
    uint64_t key;
    SteadyClock::time_point acknowledged;
  };
  absl::Mutex mu;
  std::deque<Probe> pending;  // Guarded by mu.
  // When the pushes ended (guarded by mu); probes not visible at serving
  // this long after it are counted as NOT_VISIBLE instead of being waited
  // for forever.
  std::optional<SteadyClock::time_point> pushes_ended;
  const auto kLastProbeWait = std::chrono::seconds(10);
  const SteadyClock::time_point start = SteadyClock::now();
  Window window(options, start);
  RunResult result;
  // Polls serving for the pending probes, oldest first.
  std::thread poller([&] {
    while (true) {
      std::vector<Probe> probes;
      {
        absl::MutexLock lock(&mu);
        if (pushes_ended && pending.empty()) return;
        if (pushes_ended &&
            SteadyClock::now() > *pushes_ended + kLastProbeWait) {
          for (size_t i = 0; i < pending.size(); ++i) {
            result.AddError("NOT_VISIBLE",
                            absl::StrCat("probe key ", pending[i].key,
                                         " never reached serving"));
          }
          return;
        }
        probes.assign(pending.begin(), pending.end());
      }
      if (probes.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      v1::LookupRequest request;
      request.set_table(options.table);
      for (const Probe& probe : probes) request.add_keys(probe.key);
      v1::LookupResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options.timeout_ms));
      grpc::Status status = stub->Lookup(&context, request, &response);
      const SteadyClock::time_point now = SteadyClock::now();
      if (!status.ok()) {
        // The table reaches serving a moment after it is created.
        if (status.error_code() != grpc::StatusCode::NOT_FOUND) {
          absl::MutexLock lock(&mu);
          result.AddError("LOOKUP", status.error_message());
        }
        continue;
      }
      absl::MutexLock lock(&mu);
      for (size_t i = 0; i < probes.size(); ++i) {
        if (response.values(static_cast<int>(i * options.dim)) != 1.0f) {
          continue;
        }
        window.Complete(probes[i].acknowledged, now, 1, result);
        for (auto it = pending.begin(); it != pending.end(); ++it) {
          if (it->key == probes[i].key) {
            pending.erase(it);
            break;
          }
        }
      }
    }
  });
  // Pushes batches of `batch` keys at push_keys_per_s: one fresh probe key
  // per push, the rest uniform background keys.
  const std::vector<std::vector<uint64_t>> batches =
      MakeKeyBatches(options, 0, PoolSize(options));
  const double pushes_per_s =
      options.push_keys_per_s / static_cast<double>(options.batch);
  const auto interval =
      std::chrono::nanoseconds(static_cast<int64_t>(1e9 / pushes_per_s));
  SteadyClock::time_point next = start;
  // Probe keys are fresh in each run, so that a run on a table an earlier
  // run used never waits for a row that is already past 1. Bits 24-61 hold
  // a run id from the clock, bits 0-23 the probe's number.
  const uint64_t run_id = static_cast<uint64_t>(
      std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t probe_base =
      (uint64_t{1} << 62) | ((run_id & ((uint64_t{1} << 38) - 1)) << 24);
  std::vector<float> gradients;
  for (uint64_t i = 0; !window.Over(SteadyClock::now()); ++i) {
    std::this_thread::sleep_until(next);
    next += interval;
    std::vector<uint64_t> keys = batches[i % batches.size()];
    const uint64_t probe_key = probe_base + (i & ((uint64_t{1} << 24) - 1));
    keys.push_back(probe_key);
    gradients.assign(keys.size() * options.dim, 0.0f);
    std::fill(gradients.end() - options.dim, gradients.end(), -1.0f);
    absl::Status pushed = (*client)->Push(options.table, keys, gradients);
    if (!pushed.ok()) {
      absl::MutexLock lock(&mu);
      result.AddError("PUSH", std::string(pushed.message()));
      continue;
    }
    absl::MutexLock lock(&mu);
    pending.push_back(Probe{probe_key, SteadyClock::now()});
  }
  {
    absl::MutexLock lock(&mu);
    pushes_ended = SteadyClock::now();
  }
  poller.join();
  result.seconds = options.duration_s;
  return result;
}

}  // namespace bench
}  // namespace strata
