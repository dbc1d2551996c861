#ifndef STRATA_CLIENT_SHARD_CLIENT_H_
#define STRATA_CLIENT_SHARD_CLIENT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace grpc {
class ByteBuffer;
class ChannelCredentials;
}  // namespace grpc

namespace strata {
namespace v1 {
class CheckpointRequest;
class CheckpointResponse;
class CreateTableRequest;
class CreateTableResponse;
class ListTablesResponse;
class MoveBucketsRequest;
class MoveBucketsResponse;
class PullRequest;
class PushRequest;
class PushResponse;
class RestoreRequest;
class RestoreResponse;
class SetShardMapRequest;
class SetShardMapResponse;
class ShardMap;
class StatsResponse;
}  // namespace v1

// The transport to one shard. PsClient depends on this seam only, so that
// tests can put an in-process shard behind it (PsClientOptions::
// shard_client_factory). The messages are strata.v1's (proto/strata.pb.h),
// declared here only: this header includes no generated or gRPC header.
// Implementations are thread-safe; `done` may run on another thread, exactly
// once.
class ShardClient {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~ShardClient() = default;

  virtual const std::string& address() const = 0;

  // Each call fails with DEADLINE_EXCEEDED once `deadline` passes. A
  // refusal for another shard map carries the shard's map version as a
  // payload (ShardMapVersionOf in common/shard_map.h).
  // The answer is the serialized v1::PullResponse, read with
  // PullResponseReader (common/pull_wire.h) to avoid copying the values
  // into a message first.
  virtual void PullAsync(const v1::PullRequest& request,
                         grpc::ByteBuffer* response, absl::Duration deadline,
                         Done done) = 0;
  virtual void PushAsync(const v1::PushRequest& request,
                         v1::PushResponse* response, absl::Duration deadline,
                         Done done) = 0;

  // Admin calls are rare: blocking is fine.
  virtual absl::Status CreateTable(const v1::CreateTableRequest& request,
                                   v1::CreateTableResponse* response,
                                   absl::Duration deadline) = 0;
  virtual absl::Status ListTables(v1::ListTablesResponse* response,
                                  absl::Duration deadline) = 0;
  virtual absl::Status Stats(v1::StatsResponse* response,
                             absl::Duration deadline) = 0;
  virtual absl::Status Checkpoint(const v1::CheckpointRequest& request,
                                  v1::CheckpointResponse* response,
                                  absl::Duration deadline) = 0;
  virtual absl::Status Restore(const v1::RestoreRequest& request,
                               v1::RestoreResponse* response,
                               absl::Duration deadline) = 0;
  virtual absl::Status GetShardMap(v1::ShardMap* response,
                                   absl::Duration deadline) = 0;
  virtual absl::Status SetShardMap(const v1::SetShardMapRequest& request,
                                   v1::SetShardMapResponse* response,
                                   absl::Duration deadline) = 0;
  // One step of a bucket move. Default: UNIMPLEMENTED (a replica group's
  // shards cannot move buckets yet).
  virtual absl::Status MoveBuckets(const v1::MoveBucketsRequest& request,
                                   v1::MoveBucketsResponse* response,
                                   absl::Duration deadline);
  // OK when the shard's health service answers SERVING.
  virtual absl::Status CheckHealth(absl::Duration deadline) = 0;
};

// Pull answers in shared memory from a shard on the client's machine
// (v1::SharedAnswer): the shard writes the rows once, into memory the
// client maps, and gRPC carries only the request and a few bytes of answer.
struct SharedMemoryPullOptions {
  // Offered to a shard at a loopback address (127.0.0.0/8, [::1],
  // localhost) or a unix: one; a shard that cannot use it (another pid
  // namespace, --shared_memory_answers=false) says so once and is asked no
  // more. Default: true.
  bool enabled = true;
  // Pulls in flight that can take their answer there (more go over gRPC),
  // and each one's room: an answer larger than it goes over gRPC. The
  // memory is mapped at once; its pages are taken as answers first reach
  // them. Defaults: 8, 8 MiB.
  size_t slots = 8;
  size_t slot_bytes = size_t{8} << 20;
};

// A ShardClient over a gRPC channel to `address` (host:port), made with
// `credentials` (null: insecure), sending `auth_token` (when not empty) as a
// bearer token on every call.
std::unique_ptr<ShardClient> CreateGrpcShardClient(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& auth_token = "",
    const SharedMemoryPullOptions& shared_memory = {});

// Whether `address` (a gRPC target) names this machine by a loopback
// address.
bool IsLoopbackAddress(const std::string& address);

// The replicas of one replicated shard index behind one ShardClient: calls
// go to the primary, found by following the redirects that other replicas
// answer with (a failover shows as UNAVAILABLE, which PsClient retries).
// PsClient makes one for a shard address of the form "a:1|b:2|c:3".
std::unique_ptr<ShardClient> CreateReplicaGroupShardClient(
    std::vector<std::unique_ptr<ShardClient>> replicas);

}  // namespace strata

#endif  // STRATA_CLIENT_SHARD_CLIENT_H_
