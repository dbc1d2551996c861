#ifndef STRATA_CLIENT_PS_CLIENT_H_
#define STRATA_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "common/clock.h"
#include "common/shard_map.h"

namespace strata {
namespace v1 {
class TableConfig;
class TableInfo;
}  // namespace v1

// How the values of pulls and pushes travel.
enum class WireEncoding {
  kFloat32,
  // Half the bytes: IEEE 754 binary16, rounded to nearest even.
  kFloat16,
};

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
  // Rows and gradients on the wire. Default: kFloat32.
  WireEncoding encoding = WireEncoding::kFloat32;
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
  // Pull answers through shared memory from shards on this machine
  // (client/shard_client.h).
  SharedMemoryPullOptions shared_memory_pull;
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
  // INVALID_ARGUMENT without shard addresses or for a malformed one; the
  // error of ChannelCredentialsFromFiles (common/tls.h) for unreadable TLS
  // files.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options);
  virtual ~PsClient() = default;
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // The shards of the map the client routes by (a map may add shards, whose
  // addresses it names, or remove the last ones once they own nothing).
  virtual size_t num_shards() const = 0;
  virtual const std::string& client_id() const = 0;
  // The shard that owns `key` of `table` under the client's shard map.
  virtual uint32_t ShardOf(absl::string_view table, uint64_t key) const = 0;
  // The shard map the client routes by now.
  virtual std::shared_ptr<const ShardMap> shard_map() const = 0;
  // Fetches every shard's map and keeps the newest; FAILED_PRECONDITION
  // when it is older than `at_least_version`, or has more shards than this
  // client has addresses for.
  virtual absl::Status RefreshShardMap(uint64_t at_least_version = 0) = 0;
  // Installs `map` on every shard (SetShardMap): first on the shards that
  // give buckets away, then on those that gain some, then on the rest; then
  // routes by it.
  virtual absl::Status SetShardMap(const ShardMap& map) = 0;
  // One step of a bucket move on shard `shard` (< num_shards()).
  virtual absl::Status MoveBuckets(uint32_t shard,
                                   const v1::MoveBucketsRequest& request,
                                   v1::MoveBucketsResponse* response) = 0;

  // Creates the table on every shard (idempotent for an identical config).
  virtual absl::Status CreateTable(const v1::TableConfig& config) = 0;
  // Every table, with rows and memory summed over the shards.
  virtual absl::StatusOr<std::vector<v1::TableInfo>> ListTables() = 0;

  // Writes keys.size() * dim floats, the rows of `keys` in order, to `out`;
  // dim is out.size() / keys.size().
  virtual absl::Status Pull(absl::string_view table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<float> out) = 0;
  // Pushes keys.size() * dim gradients; those of a repeated key are summed.
  // A push retried after a lost answer is applied once. `global_step` is
  // the trainer's step of the gradients (0: unknown), for tables that evict
  // rows by steps.
  virtual absl::Status Push(absl::string_view table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<const float> gradients,
                            uint64_t global_step = 0) = 0;
  // As Pull and Push, for keys the caller has already made distinct (a
  // batch's unique keys): the client skips deduplicating them again, a
  // hash-map pass over every key. REQUIRES: no key repeats (a repeated key
  // would be pulled twice, and pushed as two updates instead of one of the
  // summed gradients).
  virtual absl::Status PullDistinct(absl::string_view table,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<float> out) = 0;
  virtual absl::Status PushDistinct(absl::string_view table,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<const float> gradients,
                                    uint64_t global_step) = 0;

  // Per shard, in shard order.
  virtual absl::StatusOr<std::vector<v1::StatsResponse>> Stats() = 0;
  // `incremental`: only the rows changed since each shard's previous
  // checkpoint (see CheckpointRequest).
  virtual absl::StatusOr<std::vector<v1::CheckpointResponse>> Checkpoint(
      absl::string_view checkpoint_id, uint64_t global_step,
      bool incremental = false) = 0;
  virtual absl::StatusOr<std::vector<v1::RestoreResponse>> Restore(
      absl::string_view checkpoint_id) = 0;
  // OK when every shard reports SERVING.
  virtual absl::Status CheckHealth() = 0;

 protected:
  PsClient() = default;
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLIENT_H_
