#ifndef STRATA_CLIENT_INTERNAL_PS_CLIENT_IMPL_H_
#define STRATA_CLIENT_INTERNAL_PS_CLIENT_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "client/shard_client.h"
#include "proto/strata.pb.h"

namespace strata {
namespace client_internal {

// PsClient over one ShardClient per shard (gRPC unless the options give a
// factory): the routing, fan-out, retries and shard map handling that
// client/ps_client.h describes. Thread-safe.
class PsClientImpl final : public PsClient {
 public:
  // PsClient::Create.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options);

  size_t num_shards() const override;
  const std::string& client_id() const override { return options_.client_id; }
  uint32_t ShardOf(absl::string_view table, uint64_t key) const override;
  std::shared_ptr<const ShardMap> shard_map() const override;
  absl::Status RefreshShardMap(uint64_t at_least_version) override;
  absl::Status SetShardMap(const ShardMap& map) override;
  absl::Status MoveBuckets(uint32_t shard,
                           const v1::MoveBucketsRequest& request,
                           v1::MoveBucketsResponse* response) override;
  absl::Status CreateTable(const v1::TableConfig& config) override;
  absl::StatusOr<std::vector<v1::TableInfo>> ListTables() override;
  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> out) override;
  absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> gradients,
                    uint64_t global_step) override;
  absl::Status PullDistinct(absl::string_view table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<float> out) override;
  absl::Status PushDistinct(absl::string_view table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<const float> gradients,
                            uint64_t global_step) override;
  absl::StatusOr<std::vector<v1::StatsResponse>> Stats() override;
  absl::StatusOr<std::vector<v1::CheckpointResponse>> Checkpoint(
      absl::string_view checkpoint_id, uint64_t global_step,
      bool incremental) override;
  absl::StatusOr<std::vector<v1::RestoreResponse>> Restore(
      absl::string_view checkpoint_id) override;
  absl::Status CheckHealth() override;

 private:
  explicit PsClientImpl(const PsClientOptions& options);

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

  // Whether a call's keys may repeat (Pull, Push) or not (PullDistinct,
  // PushDistinct).
  enum class Keys { kMayRepeat, kDistinct };
  // Splits `keys` into unique keys per shard. unique_of[i] is the index of
  // keys[i] among the unique keys; location[u] its (shard, position).
  // Distinct keys are their own unique keys: no deduplication.
  struct Routing {
    std::vector<std::vector<uint64_t>> shard_keys;
    std::vector<uint32_t> unique_of;
    std::vector<std::pair<uint32_t, uint32_t>> location;
  };
  Routing Route(absl::string_view table, absl::Span<const uint64_t> keys,
                const ShardMap& map, Keys kind) const;
  absl::Status PullKeys(absl::string_view table,
                        absl::Span<const uint64_t> keys, absl::Span<float> out,
                        Keys kind);
  absl::Status PushKeys(absl::string_view table,
                        absl::Span<const uint64_t> keys,
                        absl::Span<const float> gradients, uint64_t global_step,
                        Keys kind);
  // Pull by `map`; OK with `refusals` filled when shards refused it for
  // another map (then `out` is incomplete).
  absl::Status PullRouted(absl::string_view table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> out, const ShardMap& map, Keys kind,
                          MapRefusals* refusals);
  // Push by `map` under a new sequence; the keys (and summed gradients) of
  // shards that refused it for another map are left in `refused_keys` and
  // `refused_gradients`.
  absl::Status PushRouted(absl::string_view table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> gradients,
                          uint64_t global_step, const ShardMap& map, Keys kind,
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

}  // namespace client_internal
}  // namespace strata

#endif  // STRATA_CLIENT_INTERNAL_PS_CLIENT_IMPL_H_
