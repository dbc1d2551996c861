#include "client/internal/ps_client_impl.h"

#include <cstring>
#include <optional>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/pull_wire.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "proto/shard_map_proto.h"

namespace strata {
namespace client_internal {
namespace {

std::string RandomClientId() {
  std::random_device device;
  const uint64_t high = (static_cast<uint64_t>(device()) << 32) | device();
  const uint64_t low = (static_cast<uint64_t>(device()) << 32) | device();
  return absl::StrFormat("%016x%016x", high, low);
}

absl::Status CheckSizes(absl::Span<const uint64_t> keys, size_t values,
                        const char* what) {
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " of no keys"));
  }
  if (values == 0 || values % keys.size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", values, " values for ", keys.size(),
                     " keys is not a whole number of rows"));
  }
  return absl::OkStatus();
}

// UNAVAILABLE (down, restarting), RESOURCE_EXHAUSTED (overloaded, or a full
// disk) and CANCELLED (a shard shutting down cancels the calls it holds) may
// pass. Retrying is safe for every call: pushes carry (client id, sequence)
// and a shard applies each at most once; pulls and admin calls are
// idempotent. This client never cancels its own calls, so CANCELLED always
// comes from the other side.
bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kCancelled;
}

// How many times one call fetches a newer shard map and routes again before
// it gives up (a map that keeps changing under it).
constexpr int kMaxReroutes = 8;

absl::Status TooManyReroutes(const char* what, const ShardMap& map) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": the shard map changed ", kMaxReroutes,
      " times while the call was routed (now ", map.Summary(), ")"));
}

// How often a pull that waits for an unreachable shard asks the others for
// a newer map.
constexpr absl::Duration kNewerMapCheckInterval = absl::Seconds(1);

}  // namespace

PsClientImpl::PsClientImpl(const PsClientOptions& options)
    : options_(options), shards_(kNumBuckets) {}

size_t PsClientImpl::num_shards() const { return shard_map()->num_shards(); }

absl::StatusOr<std::unique_ptr<ShardClient>> PsClientImpl::MakeShardClient(
    const std::string& address) const {
  if (address.empty()) {
    return absl::InvalidArgumentError("empty shard address");
  }
  if (address.find('|') == std::string::npos) return factory_(address);
  // A replicated shard index: its replicas' addresses joined by '|'.
  std::vector<std::unique_ptr<ShardClient>> replicas;
  for (absl::string_view replica : absl::StrSplit(address, '|')) {
    if (replica.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard address '", address, "' has an empty replica"));
    }
    replicas.push_back(factory_(std::string(replica)));
  }
  return CreateReplicaGroupShardClient(std::move(replicas));
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClientImpl::Create(
    const PsClientOptions& options) {
  if (options.shard_addresses.empty()) {
    return absl::InvalidArgumentError("no shard addresses given");
  }
  if (options.shard_addresses.size() > kNumBuckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.shard_addresses.size(), " shard addresses given, over the ",
        kNumBuckets, " buckets there are to own"));
  }
  std::unique_ptr<PsClientImpl> client(new PsClientImpl(options));
  {
    absl::MutexLock lock(&client->map_mu_);
    client->map_ = std::make_shared<const ShardMap>(ShardMap::Modulo(
        static_cast<uint32_t>(options.shard_addresses.size())));
  }
  if (client->options_.client_id.empty()) {
    client->options_.client_id = RandomClientId();
  }
  // Sequences start at the current time in microseconds, so that a client
  // restarted with the same configured id keeps numbering above its previous
  // life instead of having its new pushes taken for retries of old ones.
  client->next_sequence_ = static_cast<uint64_t>(
      std::max<int64_t>(1, absl::ToUnixMicros(options.clock->Now())));
  std::function<std::unique_ptr<ShardClient>(const std::string&)> factory =
      options.shard_client_factory;
  if (!factory) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        ChannelCredentialsFromFiles(options.tls_ca_file,
                                    options.tls_client_cert_file,
                                    options.tls_client_key_file);
    if (!credentials.ok()) return credentials.status();
    factory = [credentials = *credentials, token = options.auth_token,
               shared =
                   options.shared_memory_pull](const std::string& address) {
      return CreateGrpcShardClient(address, credentials, token, shared);
    };
  }
  client->factory_ = std::move(factory);
  for (size_t s = 0; s < options.shard_addresses.size(); ++s) {
    STRATA_ASSIGN_OR_RETURN(
        client->shards_[s],
        client->MakeShardClient(options.shard_addresses[s]));
  }
  return std::unique_ptr<PsClient>(std::move(client));
}

uint32_t PsClientImpl::ShardOf(absl::string_view table, uint64_t key) const {
  return shard_map()->OwnerOfKey(HashString(table), key);
}

std::shared_ptr<const ShardMap> PsClientImpl::shard_map() const {
  absl::MutexLock lock(&map_mu_);
  return map_;
}

absl::Status PsClientImpl::EnsureClientsFor(const ShardMap& map) {
  absl::MutexLock lock(&clients_mu_);
  for (uint32_t s = 0; s < map.num_shards(); ++s) {
    if (shards_[s] != nullptr) continue;
    if (map.addresses().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the cluster's shard map (", map.Summary(), ") has ",
          map.num_shards(), " shards, but this client was given ",
          options_.shard_addresses.size(),
          " shard addresses and the map names none: give it every shard's"));
    }
    STRATA_ASSIGN_OR_RETURN(shards_[s], MakeShardClient(map.addresses()[s]));
    STRATA_LOG(INFO, "client")
        << "shard " << s << " joined the cluster at " << map.addresses()[s];
  }
  return absl::OkStatus();
}

absl::Status PsClientImpl::RefreshShardMap(uint64_t at_least_version) {
  std::vector<size_t> all(num_shards());
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;
  return RefreshShardMapFrom(std::move(all), at_least_version);
}

absl::Status PsClientImpl::RefreshShardMapFrom(std::vector<size_t> shards,
                                               uint64_t at_least_version) {
  size_t slots = 0;
  for (size_t s : shards) slots = std::max(slots, s + 1);
  std::vector<v1::ShardMap> answers(slots);
  STRATA_RETURN_IF_ERROR(FanOut(shards, [&](size_t s, ShardClient::Done done) {
    answers[s].Clear();
    done(shards_[s]->GetShardMap(&answers[s], options_.rpc_timeout));
  }));
  std::optional<ShardMap> newest;
  for (size_t s : shards) {
    absl::StatusOr<ShardMap> map = ShardMapFromProto(answers[s]);
    if (!map.ok()) {
      return absl::InternalError(
          absl::StrCat("shard ", shards_[s]->address(),
                       " answered a bad shard map: ", map.status().message()));
    }
    if (!newest || map->version() > newest->version()) newest = *map;
  }
  if (newest->version() < at_least_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a shard refused a request for shard map version ", at_least_version,
        ", but the newest map the shards asked serve is ", newest->Summary()));
  }
  STRATA_RETURN_IF_ERROR(EnsureClientsFor(*newest));
  absl::MutexLock lock(&map_mu_);
  if (newest->version() > map_->version()) {
    STRATA_LOG(INFO, "client") << "routing by shard map " << newest->Summary()
                               << " (was version " << map_->version() << ")";
    map_ = std::make_shared<const ShardMap>(*std::move(newest));
  }
  return absl::OkStatus();
}

absl::Status PsClientImpl::MoveBuckets(uint32_t shard,
                                       const v1::MoveBucketsRequest& request,
                                       v1::MoveBucketsResponse* response) {
  if (shard >= num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", shard, " is not one of the ", num_shards(), " shards"));
  }
  return shards_[shard]->MoveBuckets(request, response, options_.rpc_timeout);
}

absl::Status PsClientImpl::SetShardMap(const ShardMap& map) {
  STRATA_RETURN_IF_ERROR(EnsureClientsFor(map));
  // The map the shards serve now, to see which give buckets away.
  STRATA_RETURN_IF_ERROR(RefreshShardMap(0));
  const std::shared_ptr<const ShardMap> current = shard_map();
  // Shards that give buckets away get the map first: until they have it
  // they would take writes for those buckets from clients of the old map,
  // while clients that learned the new one write to the new owners. Then
  // the shards that gain buckets, then the rest.
  // Shards past the map's count (removed: they own nothing) do not get it.
  std::vector<size_t> losers, gainers, others;
  for (size_t s = 0; s < map.num_shards(); ++s) {
    bool loses = false, gains = false;
    for (uint32_t b = 0; b < kNumBuckets; ++b) {
      const bool owned_now = current->OwnerOf(b) == s;
      const bool owned_next = map.OwnerOf(b) == s;
      loses |= owned_now && !owned_next;
      gains |= owned_next && !owned_now;
    }
    (loses ? losers : gains ? gainers : others).push_back(s);
  }
  v1::SetShardMapRequest request;
  *request.mutable_map() = ShardMapToProto(map);
  for (const std::vector<size_t>* group : {&losers, &gainers, &others}) {
    if (group->empty()) continue;
    STRATA_RETURN_IF_ERROR(FanOut(*group, [&](size_t s,
                                              ShardClient::Done done) {
      v1::SetShardMapResponse response;
      done(shards_[s]->SetShardMap(request, &response, options_.rpc_timeout));
    }));
  }
  absl::MutexLock lock(&map_mu_);
  if (map.version() > map_->version()) {
    map_ = std::make_shared<const ShardMap>(map);
  }
  return absl::OkStatus();
}

PsClientImpl::Routing PsClientImpl::Route(absl::string_view table,
                                          absl::Span<const uint64_t> keys,
                                          const ShardMap& map,
                                          Keys kind) const {
  const uint64_t table_hash = HashString(table);
  Routing routing;
  routing.shard_keys.resize(map.num_shards());
  routing.unique_of.resize(keys.size());
  routing.location.reserve(keys.size());
  const auto add_unique = [&](uint64_t key) {
    const uint32_t shard = map.OwnerOfKey(table_hash, key);
    routing.location.emplace_back(
        shard, static_cast<uint32_t>(routing.shard_keys[shard].size()));
    routing.shard_keys[shard].push_back(key);
  };
  if (kind == Keys::kDistinct) {
    for (size_t i = 0; i < keys.size(); ++i) {
      add_unique(keys[i]);
      routing.unique_of[i] = static_cast<uint32_t>(i);
    }
    return routing;
  }
  absl::flat_hash_map<uint64_t, uint32_t> unique;
  unique.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] = unique.try_emplace(
        keys[i], static_cast<uint32_t>(routing.location.size()));
    if (inserted) add_unique(keys[i]);
    routing.unique_of[i] = it->second;
  }
  return routing;
}

absl::Status PsClientImpl::FanOut(
    std::vector<size_t> shards,
    const std::function<void(size_t, ShardClient::Done)>& issue,
    MapRefusals* refusals) {
  Clock* clock = options_.clock;
  const absl::Time give_up = clock->Now() + options_.retry_deadline;
  absl::Duration backoff = options_.initial_backoff;
  bool retried = false;
  // Pulls: when to ask the other shards whether a newer map routes around a
  // shard that does not answer (the first time after a second of it).
  absl::Time look_for_newer_map_at = clock->Now() + kNewerMapCheckInterval;
  while (true) {
    std::vector<absl::Status> results(shards.size());
    absl::BlockingCounter pending(static_cast<int>(shards.size()));
    for (size_t i = 0; i < shards.size(); ++i) {
      issue(shards[i], [&results, &pending, i](absl::Status status) {
        results[i] = std::move(status);
        pending.DecrementCount();
      });
    }
    pending.Wait();
    std::vector<size_t> retry;
    absl::Status last_unavailable;
    for (size_t i = 0; i < shards.size(); ++i) {
      if (results[i].ok()) continue;
      if (refusals != nullptr) {
        if (std::optional<uint64_t> version = ShardMapVersionOf(results[i])) {
          refusals->shards.push_back(shards[i]);
          refusals->version = std::max(refusals->version, *version);
          continue;
        }
      }
      if (!IsRetryable(results[i].code())) return results[i];
      retry.push_back(shards[i]);
      last_unavailable = results[i];
    }
    if (retry.empty()) {
      if (retried && waiting_logged_.exchange(false)) {
        STRATA_LOG(INFO, "client") << "shards answer again; calls resumed";
      }
      return absl::OkStatus();
    }
    const absl::Duration left = give_up - clock->Now();
    if (left <= absl::ZeroDuration()) {
      // A shard that kept refusing (RESOURCE_EXHAUSTED: overloaded, or its
      // disk is full) says so; an unreachable or stopping one is UNAVAILABLE.
      const absl::StatusCode code =
          last_unavailable.code() == absl::StatusCode::kResourceExhausted
              ? absl::StatusCode::kResourceExhausted
              : absl::StatusCode::kUnavailable;
      return absl::Status(
          code, absl::StrCat(
                    last_unavailable.message(), " (gave up after retrying for ",
                    absl::FormatDuration(options_.retry_deadline), ")"));
    }
    // The last sleep is cut short so that one attempt lands on the deadline.
    if (!waiting_logged_.exchange(true)) {
      STRATA_LOG(WARNING, "client")
          << "waiting for a shard: " << last_unavailable.message()
          << "; retrying for up to "
          << absl::FormatDuration(options_.retry_deadline);
    }
    if (refusals != nullptr && refusals->reroute_unreachable_below > 0 &&
        clock->Now() >= look_for_newer_map_at) {
      look_for_newer_map_at = clock->Now() + kNewerMapCheckInterval;
      if (std::optional<std::pair<size_t, uint64_t>> newer =
              FindNewerMap(retry, refusals->reroute_unreachable_below)) {
        refusals->shards.push_back(newer->first);
        refusals->version = std::max(refusals->version, newer->second);
        return absl::OkStatus();
      }
    }
    retried = true;
    clock->SleepFor(std::min(backoff, left));
    backoff = std::min(backoff * 2, options_.max_backoff);
    shards = std::move(retry);
  }
}

std::optional<std::pair<size_t, uint64_t>> PsClientImpl::FindNewerMap(
    const std::vector<size_t>& unreachable, uint64_t version) {
  const size_t count = num_shards();
  for (size_t s = 0; s < count; ++s) {
    if (std::find(unreachable.begin(), unreachable.end(), s) !=
        unreachable.end()) {
      continue;
    }
    v1::ShardMap map;
    if (shards_[s]->GetShardMap(&map, options_.rpc_timeout).ok() &&
        map.version() > version) {
      return std::make_pair(s, map.version());
    }
  }
  return std::nullopt;
}

absl::Status PsClientImpl::ForEachShard(
    size_t count, const std::function<absl::Status(size_t)>& call) {
  std::vector<size_t> all(count);
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;
  return FanOut(all, [&call](size_t shard, ShardClient::Done done) {
    done(call(shard));
  });
}

absl::Status PsClientImpl::CreateTable(const v1::TableConfig& config) {
  v1::CreateTableRequest request;
  *request.mutable_config() = config;
  return ForEachShard(num_shards(), [&](size_t s) {
    v1::CreateTableResponse response;
    return shards_[s]->CreateTable(request, &response, options_.rpc_timeout);
  });
}

absl::StatusOr<std::vector<v1::TableInfo>> PsClientImpl::ListTables() {
  std::vector<v1::ListTablesResponse> responses(num_shards());
  STRATA_RETURN_IF_ERROR(ForEachShard(responses.size(), [&](size_t s) {
    responses[s].Clear();
    return shards_[s]->ListTables(&responses[s], options_.rpc_timeout);
  }));
  std::vector<v1::TableInfo> merged;
  absl::flat_hash_map<std::string, size_t> index;
  for (const v1::ListTablesResponse& response : responses) {
    for (const v1::TableInfo& info : response.tables()) {
      auto [it, inserted] =
          index.try_emplace(info.config().name(), merged.size());
      if (inserted) {
        merged.push_back(info);
      } else {
        v1::TableInfo& total = merged[it->second];
        total.set_num_rows(total.num_rows() + info.num_rows());
        total.set_memory_bytes(total.memory_bytes() + info.memory_bytes());
        total.set_admitted_keys(total.admitted_keys() + info.admitted_keys());
        total.set_rejected_gradients(total.rejected_gradients() +
                                     info.rejected_gradients());
        total.set_evicted_rows(total.evicted_rows() + info.evicted_rows());
        total.set_rows_in_memory(total.rows_in_memory() +
                                 info.rows_in_memory());
      }
    }
  }
  return merged;
}

absl::Status PsClientImpl::Pull(absl::string_view table,
                                absl::Span<const uint64_t> keys,
                                absl::Span<float> out) {
  return PullKeys(table, keys, out, Keys::kMayRepeat);
}

absl::Status PsClientImpl::PullDistinct(absl::string_view table,
                                        absl::Span<const uint64_t> keys,
                                        absl::Span<float> out) {
  return PullKeys(table, keys, out, Keys::kDistinct);
}

absl::Status PsClientImpl::PullKeys(absl::string_view table,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<float> out, Keys kind) {
  STRATA_RETURN_IF_ERROR(CheckSizes(keys, out.size(), "pull"));
  for (int reroutes = 0;; ++reroutes) {
    const std::shared_ptr<const ShardMap> map = shard_map();
    if (reroutes == kMaxReroutes) return TooManyReroutes("pull", *map);
    MapRefusals refusals;
    refusals.reroute_unreachable_below = map->version();
    STRATA_RETURN_IF_ERROR(PullRouted(table, keys, out, *map, kind, &refusals));
    if (refusals.shards.empty()) return absl::OkStatus();
    // Pulls are idempotent: the whole pull goes again by the newer map.
    STRATA_RETURN_IF_ERROR(
        RefreshShardMapFrom(refusals.shards, refusals.version));
  }
}

absl::Status PsClientImpl::PullRouted(absl::string_view table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<float> out,
                                      const ShardMap& map, Keys kind,
                                      MapRefusals* refusals) {
  const size_t dim = out.size() / keys.size();
  const Routing routing = Route(table, keys, map, kind);
  std::vector<v1::PullRequest> requests(map.num_shards());
  std::vector<grpc::ByteBuffer> responses(map.num_shards());
  std::vector<size_t> targets;
  for (size_t s = 0; s < map.num_shards(); ++s) {
    if (routing.shard_keys[s].empty()) continue;
    v1::TableBatch* batch = requests[s].add_batches();
    batch->set_table(std::string(table));
    batch->mutable_keys()->Add(routing.shard_keys[s].begin(),
                               routing.shard_keys[s].end());
    requests[s].set_encoding(options_.encoding == WireEncoding::kFloat16
                                 ? v1::FLOAT16
                                 : v1::FLOAT32);
    requests[s].set_shard_map_version(map.version());
    targets.push_back(s);
  }
  STRATA_RETURN_IF_ERROR(FanOut(
      targets,
      [&](size_t s, ShardClient::Done done) {
        responses[s].Clear();
        shards_[s]->PullAsync(requests[s], &responses[s], options_.rpc_timeout,
                              std::move(done));
      },
      refusals));
  if (!refusals->shards.empty()) return absl::OkStatus();
  // The first caller position of each unique key receives its row straight
  // from gRPC's buffer; repeated keys are copied from there afterwards.
  std::vector<std::vector<uint32_t>> first_position(map.num_shards());
  for (size_t s : targets)
    first_position[s].resize(routing.shard_keys[s].size());
  std::vector<bool> seen(routing.location.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t u = routing.unique_of[i];
    if (seen[u]) continue;
    seen[u] = true;
    const auto [shard, position] = routing.location[u];
    first_position[shard][position] = static_cast<uint32_t>(i);
  }
  const bool fp16 = options_.encoding == WireEncoding::kFloat16;
  const size_t value_size = fp16 ? sizeof(uint16_t) : sizeof(float);
  std::vector<uint16_t> halves(fp16 ? dim : 0);
  for (size_t s : targets) {
    PullResponseReader reader(responses[s]);
    size_t bytes = 0;
    bool batch_fp16 = false;
    absl::Status status = reader.NextBatch(&bytes, &batch_fp16);
    const size_t expected = routing.shard_keys[s].size() * dim;
    if (status.ok() && (bytes != expected * value_size || batch_fp16 != fp16)) {
      status = absl::InvalidArgumentError(
          absl::StrCat(bytes / value_size, " values for ",
                       routing.shard_keys[s].size(), " keys of table '", table,
                       "'; the caller's buffer implies dimension ", dim));
    }
    for (size_t p = 0; status.ok() && p < routing.shard_keys[s].size(); ++p) {
      float* target = out.data() + size_t{first_position[s][p]} * dim;
      if (fp16) {
        status = reader.ReadValues(halves.data(), dim * sizeof(uint16_t));
        HalvesToFloats(halves.data(), dim, target);
      } else {
        status = reader.ReadValues(target, dim * sizeof(float));
      }
    }
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("shard ", shards_[s]->address(),
                                       " answered: ", status.message()));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t u = routing.unique_of[i];
    const auto [shard, position] = routing.location[u];
    const uint32_t first = first_position[shard][position];
    if (first != i) {
      std::memcpy(out.data() + i * dim, out.data() + size_t{first} * dim,
                  dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClientImpl::Push(absl::string_view table,
                                absl::Span<const uint64_t> keys,
                                absl::Span<const float> gradients,
                                uint64_t global_step) {
  return PushKeys(table, keys, gradients, global_step, Keys::kMayRepeat);
}

absl::Status PsClientImpl::PushDistinct(absl::string_view table,
                                        absl::Span<const uint64_t> keys,
                                        absl::Span<const float> gradients,
                                        uint64_t global_step) {
  return PushKeys(table, keys, gradients, global_step, Keys::kDistinct);
}

absl::Status PsClientImpl::PushKeys(absl::string_view table,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<const float> gradients,
                                    uint64_t global_step, Keys kind) {
  STRATA_RETURN_IF_ERROR(CheckSizes(keys, gradients.size(), "push"));
  std::vector<uint64_t> refused_keys;
  std::vector<float> refused_gradients;
  for (int reroutes = 0;; ++reroutes) {
    const std::shared_ptr<const ShardMap> map = shard_map();
    if (reroutes == kMaxReroutes) return TooManyReroutes("push", *map);
    MapRefusals refusals;
    std::vector<uint64_t> next_keys;
    std::vector<float> next_gradients;
    STRATA_RETURN_IF_ERROR(PushRouted(table, keys, gradients, global_step, *map,
                                      kind, &refusals, &next_keys,
                                      &next_gradients));
    if (refusals.shards.empty()) return absl::OkStatus();
    // The refused requests were not applied: only their keys go again, by
    // the newer map and under a new sequence (a shard that applied its part
    // of this push would take the old sequence for a retry).
    STRATA_RETURN_IF_ERROR(
        RefreshShardMapFrom(refusals.shards, refusals.version));
    refused_keys = std::move(next_keys);
    refused_gradients = std::move(next_gradients);
    keys = refused_keys;
    gradients = refused_gradients;
  }
}

absl::Status PsClientImpl::PushRouted(absl::string_view table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<const float> gradients,
                                      uint64_t global_step, const ShardMap& map,
                                      Keys kind, MapRefusals* refusals,
                                      std::vector<uint64_t>* refused_keys,
                                      std::vector<float>* refused_gradients) {
  const size_t dim = gradients.size() / keys.size();
  const Routing routing = Route(table, keys, map, kind);
  // Sum the gradients of each unique key into its shard's buffer.
  std::vector<std::vector<float>> summed(map.num_shards());
  for (size_t s = 0; s < map.num_shards(); ++s) {
    summed[s].assign(routing.shard_keys[s].size() * dim, 0.0f);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto [shard, position] = routing.location[routing.unique_of[i]];
    float* target = summed[shard].data() + size_t{position} * dim;
    const float* source = gradients.data() + i * dim;
    for (size_t d = 0; d < dim; ++d) target[d] += source[d];
  }
  const uint64_t sequence = next_sequence_.fetch_add(1);
  std::vector<v1::PushRequest> requests(map.num_shards());
  std::vector<v1::PushResponse> responses(map.num_shards());
  std::vector<size_t> targets;
  for (size_t s = 0; s < map.num_shards(); ++s) {
    if (routing.shard_keys[s].empty()) continue;
    v1::PushRequest& request = requests[s];
    request.set_client_id(options_.client_id);
    request.set_sequence(sequence);
    request.set_global_step(global_step);
    request.set_encoding(options_.encoding == WireEncoding::kFloat16
                             ? v1::FLOAT16
                             : v1::FLOAT32);
    request.set_shard_map_version(map.version());
    v1::TableBatch* batch = request.add_batches();
    batch->set_table(std::string(table));
    batch->mutable_keys()->Add(routing.shard_keys[s].begin(),
                               routing.shard_keys[s].end());
    if (options_.encoding == WireEncoding::kFloat16) {
      std::vector<uint16_t> halves(summed[s].size());
      FloatsToHalves(summed[s].data(), summed[s].size(), halves.data());
      batch->set_values_fp16(
          std::string(reinterpret_cast<const char*>(halves.data()),
                      halves.size() * sizeof(uint16_t)));
    } else {
      batch->mutable_values()->Add(summed[s].begin(), summed[s].end());
    }
    targets.push_back(s);
  }
  STRATA_RETURN_IF_ERROR(FanOut(
      targets,
      [&](size_t s, ShardClient::Done done) {
        responses[s].Clear();
        shards_[s]->PushAsync(requests[s], &responses[s], options_.rpc_timeout,
                              std::move(done));
      },
      refusals));
  for (size_t s : refusals->shards) {
    refused_keys->insert(refused_keys->end(), routing.shard_keys[s].begin(),
                         routing.shard_keys[s].end());
    refused_gradients->insert(refused_gradients->end(), summed[s].begin(),
                              summed[s].end());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::StatsResponse>> PsClientImpl::Stats() {
  std::vector<v1::StatsResponse> responses(num_shards());
  STRATA_RETURN_IF_ERROR(ForEachShard(responses.size(), [&](size_t s) {
    responses[s].Clear();
    return shards_[s]->Stats(&responses[s], options_.rpc_timeout);
  }));
  return responses;
}

absl::StatusOr<std::vector<v1::CheckpointResponse>> PsClientImpl::Checkpoint(
    absl::string_view checkpoint_id, uint64_t global_step, bool incremental) {
  v1::CheckpointRequest request;
  request.set_checkpoint_id(std::string(checkpoint_id));
  request.set_global_step(global_step);
  request.set_incremental(incremental);
  std::vector<v1::CheckpointResponse> responses(num_shards());
  STRATA_RETURN_IF_ERROR(ForEachShard(responses.size(), [&](size_t s) {
    responses[s].Clear();
    return shards_[s]->Checkpoint(request, &responses[s], options_.rpc_timeout);
  }));
  return responses;
}

absl::StatusOr<std::vector<v1::RestoreResponse>> PsClientImpl::Restore(
    absl::string_view checkpoint_id) {
  v1::RestoreRequest request;
  request.set_checkpoint_id(std::string(checkpoint_id));
  std::vector<v1::RestoreResponse> responses(num_shards());
  STRATA_RETURN_IF_ERROR(ForEachShard(responses.size(), [&](size_t s) {
    responses[s].Clear();
    return shards_[s]->Restore(request, &responses[s], options_.rpc_timeout);
  }));
  return responses;
}

absl::Status PsClientImpl::CheckHealth() {
  return ForEachShard(num_shards(), [&](size_t s) {
    return shards_[s]->CheckHealth(options_.rpc_timeout);
  });
}

}  // namespace client_internal

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options) {
  return client_internal::PsClientImpl::Create(options);
}

}  // namespace strata
