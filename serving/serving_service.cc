#include "serving/serving_service.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/raw_message.h"
#include "common/replica_lag.h"
#include "common/work_queue.h"
#include "grpc/support/time.h"
#include "grpcpp/ext/health_check_service_server_builder_option.h"
#include "proto/health.grpc.pb.h"
#include "server/table_config_proto.h"
#include "serving/internal/lookup_wire.h"
#include "serving/status_page.h"

namespace strata {
namespace {

constexpr const char* kMethodNames[] = {"Lookup", "Status"};

v1::FollowedShard ToProto(const FollowState& state) {
  v1::FollowedShard shard;
  shard.set_shard_index(state.shard_index);
  shard.set_address(state.address);
  shard.set_connected(state.connected);
  shard.set_incarnation(state.incarnation);
  shard.set_applied_sequence(state.applied_sequence);
  shard.set_latest_sequence(state.latest_sequence);
  shard.set_lag_seconds(state.lag_seconds);
  shard.set_last_error(state.last_error);
  shard.set_streaming_from(state.streaming_from);
  shard.set_replica_switches(state.replica_switches);
  if (state.replica_group != nullptr) {
    *shard.mutable_replica_group() = *state.replica_group;
  }
  return shard;
}

// The followed shards: connection, positions, lag, stream counters, replica
// groups and freshness, each labelled with the shard index.
void AddShardMetrics(const std::vector<FollowState>& shards,
                     MetricFamilies* families) {
  using prometheus::MetricType;
  const struct {
    const char* name;
    const char* help;
    MetricType type;
    double (*value)(const FollowState&);
  } series[] = {
      {"strata_serving_shard_connected",
       "1 while the stream from the shard is up.", MetricType::Gauge,
       [](const FollowState& s) { return s.connected ? 1.0 : 0.0; }},
      {"strata_serving_shard_applied_sequence",
       "The shard's last change applied here.", MetricType::Gauge,
       [](const FollowState& s) {
         return static_cast<double>(s.applied_sequence);
       }},
      {"strata_serving_shard_latest_sequence",
       "The shard's last change, as it last said.", MetricType::Gauge,
       [](const FollowState& s) {
         return static_cast<double>(s.latest_sequence);
       }},
      {"strata_serving_shard_lag_seconds",
       "Age of the oldest change of the shard not applied here.",
       MetricType::Gauge, [](const FollowState& s) { return s.lag_seconds; }},
      {"strata_serving_shard_snapshots_total",
       "Full snapshots received from the shard.", MetricType::Counter,
       [](const FollowState& s) { return static_cast<double>(s.snapshots); }},
      {"strata_serving_shard_resumes_total",
       "Streams resumed from the stored position.", MetricType::Counter,
       [](const FollowState& s) { return static_cast<double>(s.resumes); }},
      {"strata_serving_shard_updates_total",
       "Deltas and table creations applied.", MetricType::Counter,
       [](const FollowState& s) { return static_cast<double>(s.updates); }},
      {"strata_serving_shard_replica_switches_total",
       "Times the stream moved to another replica of the shard.",
       MetricType::Counter,
       [](const FollowState& s) {
         return static_cast<double>(s.replica_switches);
       }},
      // 0 until a replicated shard's primary has described its group.
      {"strata_serving_shard_primary_term",
       "Term of the replicated shard's primary (0: not replicated).",
       MetricType::Gauge,
       [](const FollowState& s) {
         return s.replica_group ? static_cast<double>(s.replica_group->term())
                                : 0.0;
       }},
  };
  for (const auto& one : series) {
    prometheus::MetricFamily& family =
        AddFamily(families, one.name, one.help, one.type);
    for (const FollowState& s : shards) {
      AddSample(family, {{"shard", absl::StrCat(s.shard_index)}}, one.value(s));
    }
  }
  prometheus::MetricFamily& replica_lag = AddFamily(
      families, "strata_serving_shard_replica_lag",
      "Updates a replicated shard's follower replica is behind its primary, "
      "as the primary last said.",
      MetricType::Gauge);
  for (const FollowState& s : shards) {
    if (s.replica_group == nullptr) continue;
    for (const v1::FollowerInfo& follower : s.replica_group->followers()) {
      AddSample(
          replica_lag,
          {{"shard", absl::StrCat(s.shard_index)},
           {"replica", follower.replica_id()}},
          static_cast<double>(ReplicaLag(s.replica_group->position_sequence(),
                                         follower.acknowledged_sequence())));
    }
  }
  prometheus::MetricFamily& freshness = AddFamily(
      families, "strata_serving_freshness_seconds",
      "Time from a push's acknowledgement on a training shard to its rows "
      "being visible here.",
      MetricType::Histogram);
  for (const FollowState& s : shards) {
    AddHistogramSample(freshness, {{"shard", absl::StrCat(s.shard_index)}},
                       FollowState::kFreshnessBounds, s.freshness_buckets,
                       s.freshness_sum_seconds);
  }
}

// The row cache in front of the store's RocksDB.
void AddCacheMetrics(const RowCacheStats& cache, MetricFamilies* families) {
  AddGauge(families, "strata_serving_row_cache_rows",
           "Rows the row cache holds.", static_cast<double>(cache.rows));
  AddGauge(families, "strata_serving_row_cache_capacity_rows",
           "Rows the row cache may hold (--cache_rows).",
           static_cast<double>(cache.capacity));
  AddCounter(families, "strata_serving_row_cache_hits_total",
             "Rows looked up that the row cache held.",
             static_cast<double>(cache.hits));
  AddCounter(families, "strata_serving_row_cache_misses_total",
             "Rows looked up that the row cache did not hold (read from "
             "RocksDB).",
             static_cast<double>(cache.misses));
  AddCounter(families, "strata_serving_row_cache_evictions_total",
             "Rows the row cache dropped to make room for others.",
             static_cast<double>(cache.evictions));
}

}  // namespace

// grpc.health.v1.Health, served by the request threads: the server then has
// no callback method, which would start gRPC's polling callback threads.
class ServingService::HealthService final
    : public grpc::health::v1::Health::WithRawMethod_Check<
          grpc::health::v1::Health::Service> {};

// A call from its arrival to its answer.
struct ServingService::Call {
  enum class Kind { kLookup, kStatus, kHealth };
  explicit Call(Kind call_kind) : kind(call_kind), responder(&context) {}
  const Kind kind;
  grpc::ServerContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder;
  absl::Time received;
  // Finish was called: the next event of this call is its last.
  bool answering = false;
};

// The request threads and the completion queue they all poll. A thread
// takes every call that has arrived, refuses lookups past the queue at once,
// serves the oldest waiting lookup and answers, and polls again: no thread
// wakes another for a lookup (two context switches and a wake-up each, a
// third of the serving PS's CPU under overload when gRPC's threads received
// and a pool served). The threads share one queue of waiting lookups, so
// that the calls of a single connection (which gRPC matches to one
// completion queue) spread over all of them. Status and health checks are
// answered as they arrive.
class ServingService::RequestThreads {
 public:
  RequestThreads(ServingService* service,
                 std::unique_ptr<grpc::ServerCompletionQueue> queue,
                 size_t threads)
      : service_(service),
        queue_(std::move(queue)),
        num_threads_(threads),
        max_waiting_(
            std::max<size_t>(1, service->options_.max_queued_requests)) {}

  void Start() {
    for (size_t i = 0; i < max_waiting_ + kSpareLookupRequests; ++i) {
      RequestCall(Kind::kLookup);
    }
    for (size_t i = 0; i < kOtherRequests; ++i) {
      RequestCall(Kind::kStatus);
      RequestCall(Kind::kHealth);
    }
    for (size_t i = 0; i < num_threads_; ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }

  // Once the server has shut down: only the queue's end is left to take.
  void Stop() {
    queue_->Shutdown();
    if (!threads_.empty()) {
      for (std::thread& thread : threads_) thread.join();
      threads_.clear();
    } else {
      void* tag;
      bool ok;
      while (queue_->Next(&tag, &ok)) delete static_cast<Call*>(tag);
    }
    absl::MutexLock lock(&mu_);
    for (Call* call : waiting_) delete call;
    waiting_.clear();
  }

 private:
  using Kind = Call::Kind;
  // Lookups requested beyond the queue, so that a burst of arrivals is seen
  // (and refused) at once rather than left in gRPC.
  static constexpr size_t kSpareLookupRequests = 16;
  static constexpr size_t kOtherRequests = 2;  // Of Status and of Check each.
  // Events a thread takes at most between two lookups it serves: a flood of
  // arrivals cannot starve the waiting lookups.
  static constexpr size_t kMaxEventsPerLookup = 64;

  void Run() {
    const int nice = service_->options_.request_thread_nice;
    if (nice > 0) LowerThisThreadPriority(nice);
    size_t events = 0;
    while (true) {
      void* tag = nullptr;
      bool ok = false;
      // Blocks only while no lookup waits; otherwise takes what is ready.
      grpc::CompletionQueue::NextStatus next = grpc::CompletionQueue::TIMEOUT;
      if (events < kMaxEventsPerLookup) {
        next = queue_->AsyncNext(&tag, &ok,
                                 AnyWaiting()
                                     ? gpr_time_0(GPR_CLOCK_MONOTONIC)
                                     : gpr_inf_future(GPR_CLOCK_MONOTONIC));
      }
      if (next == grpc::CompletionQueue::SHUTDOWN) return;
      if (next == grpc::CompletionQueue::TIMEOUT) {
        ServeOldest();
        events = 0;
        continue;
      }
      ++events;
      HandleEvent(static_cast<Call*>(tag), ok);
    }
  }

  bool AnyWaiting() {
    absl::MutexLock lock(&mu_);
    return !waiting_.empty();
  }

  void RequestCall(Kind kind) {
    auto* call = new Call(kind);
    grpc::ServerCompletionQueue* queue = queue_.get();
    switch (kind) {
      case Kind::kLookup:
        service_->RequestLookup(&call->context, &call->request,
                                &call->responder, queue, queue, call);
        return;
      case Kind::kStatus:
        service_->RequestStatus(&call->context, &call->request,
                                &call->responder, queue, queue, call);
        return;
      case Kind::kHealth:
        service_->health_->RequestCheck(&call->context, &call->request,
                                        &call->responder, queue, queue, call);
        return;
    }
  }

  void HandleEvent(Call* call, bool ok) {
    // Answered, or a request the shutting-down server returned unmatched.
    if (call->answering || !ok) {
      delete call;
      return;
    }
    RequestCall(call->kind);
    call->received = service_->options_.clock->Now();
    switch (call->kind) {
      case Kind::kLookup:
        Admit(call);
        return;
      case Kind::kStatus:
        Answer(call, service_->ServeStatus(call->context, call->request,
                                           &call->response));
        return;
      case Kind::kHealth:
        Answer(call, AnswerHealthCheck(call->request, &call->response));
        return;
    }
  }

  // SERVING for the server ("") and the serving service; NOT_FOUND for any
  // other service name, as gRPC's own health service answers.
  static absl::Status AnswerHealthCheck(const grpc::ByteBuffer& request,
                                        grpc::ByteBuffer* response) {
    grpc::health::v1::HealthCheckRequest parsed;
    absl::Status status = ParseRequest(request, "Check", &parsed);
    if (!status.ok()) return status;
    if (!parsed.service().empty() &&
        parsed.service() != v1::ServingService::service_full_name()) {
      return absl::NotFoundError(
          absl::StrCat("no health status for service '", parsed.service(),
                       "'; this server reports '' and '",
                       v1::ServingService::service_full_name(), "'"));
    }
    grpc::health::v1::HealthCheckResponse answer;
    answer.set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    SerializeResponse(answer, response);
    return absl::OkStatus();
  }

  void Admit(Call* call) {
    if (absl::Status authorized =
            service_->AuthorizeRead(call->context, kLookup);
        !authorized.ok()) {
      Answer(call, authorized);
      return;
    }
    absl::Status refused = TryQueue(call);
    if (!refused.ok()) Answer(call, refused);
  }

  // OK when `call` now waits; otherwise why it is refused.
  absl::Status TryQueue(Call* call) {
    absl::MutexLock lock(&mu_);
    if (waiting_.size() >= max_waiting_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "overloaded: ", max_waiting_,
          " lookups wait already (--max_queued_requests); retry later"));
    }
    const absl::Duration max_wait = service_->options_.max_queue_wait;
    if (max_wait > absl::ZeroDuration() && !waiting_.empty() &&
        call->received - waiting_.front()->received > max_wait) {
      return absl::ResourceExhaustedError(
          absl::StrCat("overloaded: the oldest waiting lookup has waited over ",
                       absl::ToDoubleMilliseconds(max_wait),
                       " ms (--max_queue_wait_ms); retry later"));
    }
    waiting_.push_back(call);
    return absl::OkStatus();
  }

  void ServeOldest() {
    Call* call = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) return;
      call = waiting_.front();
      waiting_.pop_front();
    }
    if (call->context.deadline() <= std::chrono::system_clock::now()) {
      // Its caller has given up: no work is done for it.
      Answer(call, absl::DeadlineExceededError(
                       "dropped unprocessed: the lookup's deadline passed "
                       "while it waited to be served"));
      return;
    }
    Answer(call, service_->ServeLookup(call->request, &call->response));
  }

  void Answer(Call* call, const absl::Status& status) {
    call->answering = true;
    if (call->kind != Kind::kHealth) {
      service_->Record(call->kind == Kind::kLookup ? kLookup : kStatus,
                       status.code(),
                       service_->options_.clock->Now() - call->received);
    }
    if (status.ok()) {
      call->responder.Finish(call->response, grpc::Status::OK, call);
    } else {
      call->responder.FinishWithError(ToGrpcStatus(status), call);
    }
  }

  ServingService* const service_;
  const std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  const size_t num_threads_;
  const size_t max_waiting_;
  absl::Mutex mu_;
  // Lookups received, not yet served, oldest first.
  std::deque<Call*> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

ServingService::ServingService(const ServingServiceOptions& options)
    : options_(options), health_(std::make_unique<HealthService>()) {}

ServingService::~ServingService() {
  if (request_threads_ != nullptr) request_threads_->Stop();
}

void ServingService::ConfigureServer(grpc::ServerBuilder& builder) {
  // Passing no service turns gRPC's own off for this server.
  builder.SetOption(
      std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.RegisterService(health_.get());
  request_threads_ = std::make_unique<RequestThreads>(
      this, builder.AddCompletionQueue(),
      static_cast<size_t>(options_.request_threads > 0
                              ? options_.request_threads
                              : UsableCores()));
}

void ServingService::StartRequestThreads() {
  if (request_threads_ != nullptr) request_threads_->Start();
}

void ServingService::Record(Method method, absl::StatusCode code,
                            absl::Duration latency) {
  const size_t c = static_cast<size_t>(code);
  ++requests_[method]
             [c < kCodes ? c : static_cast<size_t>(absl::StatusCode::kUnknown)];
  latency_[method].Observe(absl::ToDoubleSeconds(latency));
}

absl::Status ServingService::AuthorizeRead(
    const grpc::ServerContextBase& context, Method method) const {
  if (!options_.auth_reads) return absl::OkStatus();
  return CheckBearerToken(context.client_metadata(), options_.auth_token,
                          kMethodNames[method]);
}

absl::Status ServingService::ServeLookup(const grpc::ByteBuffer& request,
                                         grpc::ByteBuffer* response) {
  v1::LookupRequest parsed;
  absl::Status status = ParseRequest(request, "Lookup", &parsed);
  if (status.ok()) status = DoLookup(parsed, response);
  return status;
}

absl::Status ServingService::DoLookup(const v1::LookupRequest& request,
                                      grpc::ByteBuffer* response) {
  if (request.keys().empty()) {
    return absl::InvalidArgumentError("lookup request holds no keys");
  }
  const uint64_t n = static_cast<uint64_t>(request.keys_size());
  if (n > options_.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lookup request holds ", n, " keys, over the maximum of ",
        options_.max_keys_per_request, " (--max_keys_per_request)"));
  }
  absl::StatusOr<EmbeddingTableConfig> config =
      options_.store->GetTableConfig(request.table());
  if (!config.ok()) return config.status();
  if (!v1::ValueEncoding_IsValid(request.encoding())) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookup request asks for value encoding ",
                     request.encoding(), ", not FLOAT32 (0) or FLOAT16 (1)"));
  }
  const bool fp16 = request.encoding() == v1::FLOAT16;
  // Counted as floats either way: an fp16 answer is built from floats.
  const uint64_t bytes = n * config->dim * sizeof(float);
  if (bytes > options_.max_response_bytes) {
    // Refused before the answer is allocated; it could never succeed.
    return absl::InvalidArgumentError(absl::StrCat(
        "lookup answer would hold ", bytes, " bytes of values (", n,
        " keys of dimension ", config->dim, "), over the limit of ",
        options_.max_response_bytes, " bytes: look up fewer keys per request"));
  }
  serving_internal::LookupResponseWriter answer(n * config->dim, fp16);
  absl::StatusOr<size_t> missing = options_.store->Lookup(
      request.table(),
      absl::MakeConstSpan(request.keys().data(), request.keys_size()),
      answer.values());
  if (!missing.ok()) return missing.status();
  *response = answer.Finish(config->dim, static_cast<uint32_t>(*missing));
  keys_ += n;
  missing_keys_ += *missing;
  return absl::OkStatus();
}

void ServingService::DoStatus(v1::ServingStatusResponse& response) {
  response.set_mode(options_.mode);
  if (options_.shards) {
    for (const FollowState& state : options_.shards()) {
      *response.add_shards() = ToProto(state);
    }
  }
  for (const ServingTableStats& table : options_.store->ListTables()) {
    v1::TableInfo* info = response.add_tables();
    *info->mutable_config() = TableConfigToProto(table.config);
    info->set_num_rows(table.num_rows);
  }
}

absl::Status ServingService::ServeStatus(const grpc::ServerContextBase& context,
                                         const grpc::ByteBuffer& request,
                                         grpc::ByteBuffer* response) {
  absl::Status status = AuthorizeRead(context, kStatus);
  v1::ServingStatusRequest parsed;
  if (status.ok()) status = ParseRequest(request, "Status", &parsed);
  if (status.ok()) {
    v1::ServingStatusResponse answer;
    DoStatus(answer);
    SerializeResponse(answer, response);
  }
  return status;
}

std::string ServingService::StatusPage(int refresh_seconds) {
  v1::ServingStatusResponse status;
  DoStatus(status);
  return RenderStatusPage(status, keys_.load(), missing_keys_.load(),
                          traffic_.Samples(), refresh_seconds);
}

void ServingService::SampleTraffic(absl::Time now) {
  CounterReading reading;
  uint64_t lookups = 0;
  for (const auto& count : requests_[kLookup]) lookups += count.load();
  reading.counters = {lookups, keys_.load(), missing_keys_.load()};
  reading.histograms = {latency_[kLookup].Counts()};
  double lag = 0;
  if (options_.shards) {
    for (const FollowState& shard : options_.shards()) {
      lag = std::max(lag, shard.lag_seconds);
    }
  }
  reading.gauges = {lag};
  traffic_.Add(now, std::move(reading));
}

void ServingService::AddMetrics(MetricFamilies* families) {
  prometheus::MetricFamily& requests = AddFamily(
      families, "strata_serving_requests_total",
      "Requests by method and status code.", prometheus::MetricType::Counter);
  for (size_t m = 0; m < kMethods; ++m) {
    for (size_t c = 0; c < kCodes; ++c) {
      const uint64_t n = requests_[m][c].load();
      if (n == 0 && c != 0) continue;
      AddSample(requests,
                {{"method", kMethodNames[m]},
                 {"code",
                  absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}},
                static_cast<double>(n));
    }
  }
  prometheus::MetricFamily& latency = AddFamily(
      families, "strata_serving_request_duration_seconds",
      "Request latency by method, from the call's arrival to its answer "
      "(queueing included).",
      prometheus::MetricType::Histogram);
  for (size_t m = 0; m < kMethods; ++m) {
    latency_[m].AddTo(latency, {{"method", kMethodNames[m]}});
  }
  AddCounter(families, "strata_serving_keys_total", "Keys looked up.",
             static_cast<double>(keys_.load()));
  AddCounter(families, "strata_serving_missing_keys_total",
             "Keys looked up that had no row.",
             static_cast<double>(missing_keys_.load()));
  AddShardMetrics(
      options_.shards ? options_.shards() : std::vector<FollowState>(),
      families);
  AddCacheMetrics(options_.store->CacheStats(), families);
  prometheus::MetricFamily& rows = AddFamily(
      families, "strata_serving_table_rows",
      "Rows this serving PS holds, per table.", prometheus::MetricType::Gauge);
  for (const ServingTableStats& t : options_.store->ListTables()) {
    AddSample(rows, {{"table", t.config.name}},
              static_cast<double>(t.num_rows));
  }
}

}  // namespace strata
