#ifndef STRATA_WORKER_PS_CLIENT_H_
#define STRATA_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/shard_map.h"
#include "proto/strata.pb.h"
#include "worker/shard_client.h"

namespace strata {

struct PsClientOptions {
  // host:port of every shard, in shard-index order. Required.
  std::vector<std::string> shard_addresses;
  // Deadline of each attempt of each call. Default: 10 s.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // How long a call retries shards that answer UNAVAILABLE, RESOURCE_EXHAUSTED
  // or CANCELLED (a shard shutting down cancels its calls). Default: 30 s.
  absl::Duration retry_deadline = absl::Seconds(30);
  // Backoff between retries, doubling up to max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // Identifies this client's pushes for deduplication. Default: random.
  std::string client_id;
  // Values on the wire; FLOAT16 halves the bytes. Default: FLOAT32.
  v1::ValueEncoding encoding = v1::FLOAT32;
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
  // TLS: when tls_ca_file is set, the shards are reached over TLS and
  // verified against this PEM CA (the address's host must match their
  // certificate). A client certificate and key (both or neither) are
  // presented to shards that require one. Default: empty (insecure).
  std::string tls_ca_file;
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  // Bearer token sent as "authorization" metadata on every call; the caller
  // reads it from a file. Default: empty (none sent).
  std::string auth_token;
  // Makes the transport to a shard. Default: CreateGrpcShardClient.
  std::function<std::unique_ptr<ShardClient>(const std::string&)>
      shard_client_factory;
};

// The worker's view of a sharded training PS. Routes each key by its virtual
// bucket (hash of table and key, mod kNumBuckets) and the cluster's shard
// map (buckets to shards, versioned): it starts from the map a new cluster
// has (ShardMap::Modulo) and, when a shard refuses a request routed by
// another map, fetches the newest map from the shards and routes the refused
// keys again (a refused request was not applied; its keys go out under a new
// push sequence), so callers never see that refusal;
// deduplicates the keys of a batch, sums the gradients of duplicate keys,
// sends one request per shard concurrently, merges the answers back into the
// caller's key order, sets a deadline on every call and retries UNAVAILABLE
// with backoff. Errors name the shard that failed. Thread-safe.
//
// Example:
//   PsClientOptions options;
//   options.shard_addresses = {"127.0.0.1:50051", "127.0.0.1:50052"};
//   auto client = PsClient::Create(options);
//   std::vector<float> rows(keys.size() * 16);
//   (*client)->Pull("user", keys, absl::MakeSpan(rows));
//   (*client)->Push("user", keys, gradients);
class PsClient {
 public:
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options);
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // The shards of the map the client routes by (a map may add shards, whose
  // addresses it names, or remove the last ones once they own nothing).
  size_t num_shards() const;
  const std::string& client_id() const { return options_.client_id; }
  // The shard that owns `key` of `table` under the client's shard map.
  uint32_t ShardOf(absl::string_view table, uint64_t key) const;
  // The shard map the client routes by now.
  std::shared_ptr<const ShardMap> shard_map() const;
  // Fetches every shard's map and keeps the newest; FAILED_PRECONDITION
  // when it is older than `at_least_version`, or has more shards than this
  // client has addresses for.
  absl::Status RefreshShardMap(uint64_t at_least_version = 0);
  // Installs `map` on every shard (SetShardMap): first on the shards that
  // give buckets away, then on those that gain some, then on the rest; then
  // routes by it.
  absl::Status SetShardMap(const ShardMap& map);
  // One step of a bucket move on shard `shard` (< num_shards()).
  absl::Status MoveBuckets(uint32_t shard,
                           const v1::MoveBucketsRequest& request,
                           v1::MoveBucketsResponse* response);

  // Creates the table on every shard (idempotent for an identical config).
  absl::Status CreateTable(const v1::TableConfig& config);
  // Every table, with rows and memory summed over the shards.
  absl::StatusOr<std::vector<v1::TableInfo>> ListTables();

  // Writes keys.size() * dim floats, the rows of `keys` in order, to `out`;
  // dim is out.size() / keys.size().
  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> out);
  // Pushes keys.size() * dim gradients; those of a repeated key are summed.
  // A push retried after a lost answer is applied once. `global_step` is
  // the trainer's step of the gradients (0: unknown), for tables that evict
  // rows by steps.
  absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> gradients,
                    uint64_t global_step = 0);

  // Per shard, in shard order.
  absl::StatusOr<std::vector<v1::StatsResponse>> Stats();
  // `incremental`: only the rows changed since each shard's previous
  // checkpoint (see CheckpointRequest).
  absl::StatusOr<std::vector<v1::CheckpointResponse>> Checkpoint(
      absl::string_view checkpoint_id, uint64_t global_step,
      bool incremental = false);
  absl::StatusOr<std::vector<v1::RestoreResponse>> Restore(
      absl::string_view checkpoint_id);
  // OK when every shard reports SERVING.
  absl::Status CheckHealth();

 private:
  explicit PsClient(const PsClientOptions& options);

  // The shards that refused a fan-out's requests because they were routed
  // by another shard map, and the newest map version they named.
  struct MapRefusals {
    std::vector<size_t> shards;
    uint64_t version = 0;
    // Pulls (idempotent) set it to the version they were routed by: a shard
    // that stays unreachable may be one a newer map no longer uses (it left
    // the cluster), so after a while the other shards are asked for their
    // map, and a newer one ends the call as a refusal by the shard that
    // answered it.
    uint64_t reroute_unreachable_below = 0;
  };
  // Some shard outside `unreachable` (of the current map's) that serves a
  // map newer than `version`, with that version; nullopt when none answers
  // one.
  std::optional<std::pair<size_t, uint64_t>> FindNewerMap(
      const std::vector<size_t>& unreachable, uint64_t version);

  // Calls `issue(shard, done)` for each shard in `shards` concurrently, and
  // again for those that answered a retryable code, with backoff, until all
  // succeed, one fails otherwise, or the retry deadline passes. With
  // `refusals`, a shard that refuses for another shard map is recorded
  // there instead of failing the call. Logs one WARNING when calls start
  // waiting for a shard and one INFO when a waited call gets through, not
  // one per retry.
  absl::Status FanOut(
      std::vector<size_t> shards,
      const std::function<void(size_t, ShardClient::Done)>& issue,
      MapRefusals* refusals = nullptr);
  // FanOut for the blocking admin calls, on shards 0..count-1.
  absl::Status ForEachShard(size_t count,
                            const std::function<absl::Status(size_t)>& call);

  // Splits `keys` into unique keys per shard. unique_of[i] is the index of
  // keys[i] among the unique keys; location[u] its (shard, position).
  struct Routing {
    std::vector<std::vector<uint64_t>> shard_keys;
    std::vector<uint32_t> unique_of;
    std::vector<std::pair<uint32_t, uint32_t>> location;
  };
  Routing Route(absl::string_view table, absl::Span<const uint64_t> keys,
                const ShardMap& map) const;
  // Pull by `map`; OK with `refusals` filled when shards refused it for
  // another map (then `out` is incomplete).
  absl::Status PullRouted(absl::string_view table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> out, const ShardMap& map,
                          MapRefusals* refusals);
  // Push by `map` under a new sequence; the keys (and summed gradients) of
  // shards that refused it for another map are left in `refused_keys` and
  // `refused_gradients`.
  absl::Status PushRouted(absl::string_view table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> gradients,
                          uint64_t global_step, const ShardMap& map,
                          MapRefusals* refusals,
                          std::vector<uint64_t>* refused_keys,
                          std::vector<float>* refused_gradients);
  // RefreshShardMap asking only `shards` (those that refused a call for
  // another map: they serve a map at least that new), so that a shard that
  // is down does not hold up the calls that do not need it.
  absl::Status RefreshShardMapFrom(std::vector<size_t> shards,
                                   uint64_t at_least_version);
  // Makes the client of each shard of `map` this client has none for yet,
  // from the map's addresses; FAILED_PRECONDITION when it names none.
  absl::Status EnsureClientsFor(const ShardMap& map)
      ABSL_LOCKS_EXCLUDED(clients_mu_);
  // The client of one shard address (replicas joined by '|').
  absl::StatusOr<std::unique_ptr<ShardClient>> MakeShardClient(
      const std::string& address) const;

  PsClientOptions options_;
  std::function<std::unique_ptr<ShardClient>(const std::string&)> factory_;
  // One slot per shard a map can name (kNumBuckets): the first from
  // options_.shard_addresses, others made when a map names them (never
  // replaced or removed, so a slot below a routed map's count is set).
  std::vector<std::unique_ptr<ShardClient>> shards_;
  // Held while slots are filled.
  absl::Mutex clients_mu_;
  mutable absl::Mutex map_mu_;
  std::shared_ptr<const ShardMap> map_ ABSL_GUARDED_BY(map_mu_);
  std::atomic<uint64_t> next_sequence_{1};
  // True from the WARNING that calls are waiting for a shard until a retried
  // call succeeds (so one outage logs one line, whatever the callers).
  std::atomic<bool> waiting_logged_{false};
};

}  // namespace strata

#endif  // STRATA_WORKER_PS_CLIENT_H_
