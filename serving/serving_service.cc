#include "serving/serving_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/raw_message.h"
#include "common/replica_lag.h"
#include "server/table_config_proto.h"
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

}  // namespace

ServingService::ServingService(const ServingServiceOptions& options)
    : options_(options),
      queue_(std::make_unique<WorkQueue>(WorkQueue::Options{
          options.request_threads, options.max_queued_requests,
          absl::ToChronoNanoseconds(options.max_queue_wait),
          options.serve_inline_when_idle, options.request_thread_nice})) {}

ServingService::~ServingService() { queue_.reset(); }

void ServingService::Record(Method method, absl::StatusCode code,
                            absl::Duration latency) {
  const size_t c = static_cast<size_t>(code);
  ++requests_[method]
             [c < kCodes ? c : static_cast<size_t>(absl::StatusCode::kUnknown)];
  latency_[method].Observe(absl::ToDoubleSeconds(latency));
}

absl::Status ServingService::AuthorizeRead(grpc::CallbackServerContext* context,
                                           Method method) const {
  if (!options_.auth_reads) return absl::OkStatus();
  return CheckBearerToken(context->client_metadata(), options_.auth_token,
                          kMethodNames[method]);
}

absl::Status ServingService::DoLookup(const v1::LookupRequest& request,
                                      v1::LookupResponse& response) {
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
  const uint64_t bytes = n * config->dim * sizeof(float);
  if (bytes > options_.max_response_bytes) {
    // Refused before the answer is allocated; it could never succeed.
    return absl::InvalidArgumentError(absl::StrCat(
        "lookup answer would hold ", bytes, " bytes of values (", n,
        " keys of dimension ", config->dim, "), over the limit of ",
        options_.max_response_bytes, " bytes: look up fewer keys per request"));
  }
  response.set_dim(config->dim);
  response.mutable_values()->Resize(static_cast<int>(n * config->dim), 0.0f);
  absl::StatusOr<size_t> missing = options_.store->Lookup(
      request.table(),
      absl::MakeConstSpan(request.keys().data(), request.keys_size()),
      absl::MakeSpan(response.mutable_values()->mutable_data(),
                     response.values_size()));
  if (!missing.ok()) return missing.status();
  response.set_num_missing(static_cast<uint32_t>(*missing));
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

grpc::ServerUnaryReactor* ServingService::Lookup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  const absl::Time start = options_.clock->Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, reactor, start](const absl::Status& status) {
    Record(kLookup, status.code(), options_.clock->Now() - start);
    reactor->Finish(ToGrpcStatus(status));
  };
  if (absl::Status authorized = AuthorizeRead(context, kLookup);
      !authorized.ok()) {
    finish(authorized);
    return reactor;
  }
  queue_->SubmitCall(
      context->deadline(), [context] { return context->IsCancelled(); },
      [this, request, response] {
        v1::LookupRequest parsed;
        absl::Status status = ParseRequest(*request, "Lookup", &parsed);
        v1::LookupResponse answer;
        if (status.ok()) status = DoLookup(parsed, answer);
        if (status.ok()) SerializeResponse(answer, response);
        return status;
      },
      std::move(finish), "lookup");
  return reactor;
}

grpc::ServerUnaryReactor* ServingService::Status(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  const absl::Time start = options_.clock->Now();
  absl::Status status = AuthorizeRead(context, kStatus);
  v1::ServingStatusRequest parsed;
  if (status.ok()) status = ParseRequest(*request, "Status", &parsed);
  if (status.ok()) {
    v1::ServingStatusResponse answer;
    DoStatus(answer);
    SerializeResponse(answer, response);
  }
  Record(kStatus, status.code(), options_.clock->Now() - start);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
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
  prometheus::MetricFamily& rows = AddFamily(
      families, "strata_serving_table_rows",
      "Rows this serving PS holds, per table.", prometheus::MetricType::Gauge);
  for (const ServingTableStats& t : options_.store->ListTables()) {
    AddSample(rows, {{"table", t.config.name}},
              static_cast<double>(t.num_rows));
  }
}

}  // namespace strata
