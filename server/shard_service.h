#ifndef STRATA_SERVER_SHARD_SERVICE_H_
#define STRATA_SERVER_SHARD_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/daemon.h"
#include "common/pull_wire.h"
#include "common/shard_map.h"
#include "common/work_queue.h"
#include "embedding/embedding_store.h"
#include "proto/strata.grpc.pb.h"
#include "server/request_metrics.h"

namespace strata {

class ReplicaGroup;
class ShardMapStore;
namespace server_internal {
class BucketMoveSource;
class SharedAnswers;
}  // namespace server_internal

struct ShardServiceOptions {
  // The store this shard serves; not owned, must outlive the service.
  EmbeddingStore* store = nullptr;
  // The shard's replica group when it is replicated: pushes, table
  // creations and restores go through it, and only its primary answers.
  // Not owned, must outlive the service. Default: null (not replicated).
  ReplicaGroup* replica_group = nullptr;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  // The shard map the shard starts with. Default: null, for
  // ShardMap::Modulo(num_shards).
  std::shared_ptr<const ShardMap> shard_map;
  // Where SetShardMap keeps a new map before using it, and where a shard
  // that gets a request routed by a newer map than its own looks for it.
  // Not owned, must outlive the service. Default: null (kept in memory
  // only).
  ShardMapStore* shard_map_store = nullptr;
  // The store's data directory: each checkpoint records there the shard map
  // it was taken under, and a restore refuses a checkpoint whose map places
  // buckets otherwise. Default: empty (not recorded, not checked).
  std::string data_dir;
  // Keys in one request, over all its batches. Default: 262144.
  uint64_t max_keys_per_request = 262144;
  // When not empty, CreateTable, Push, Checkpoint, Restore and Subscribe
  // need "authorization: Bearer <auth_token>" metadata; Pull, ListTables
  // and Stats too with auth_reads. Health stays open. Default: empty (no
  // check).
  std::string auth_token;
  bool auth_reads = false;
  // Bytes of values one Pull may answer with (keys x dim x value size),
  // checked before anything is looked up. Default: 512 MiB less room for
  // the keys and framing.
  uint64_t max_response_bytes = kMaxAnswerValueBytes;
  // Pulls and pushes wait for `request_threads` threads (0: the machine's
  // cores) in a queue of at most `max_queued_requests`; past it they are
  // refused with RESOURCE_EXHAUSTED at once, and one whose deadline passed
  // while it waited is dropped unprocessed (DEADLINE_EXCEEDED). A pull that
  // finds fewer than `request_threads` calls served and none waiting is
  // served at once on the gRPC thread that received it. Defaults: 0, 64.
  int request_threads = 0;
  size_t max_queued_requests = 64;
  // Also refused while the oldest waiting one has waited longer than this
  // (common/work_queue.h); zero: no such bound. Default: zero.
  absl::Duration max_queue_wait = absl::ZeroDuration();
  // Nice increment of the request threads (WorkQueue::Options::thread_nice):
  // gRPC's threads, which receive calls and refuse the excess, come first
  // on a loaded core. Default: 0.
  int request_thread_nice = 0;
  // Change streams (Subscribe) open at once; more are refused with
  // RESOURCE_EXHAUSTED. Each may hold a snapshot of the tables it follows
  // while it is sent. Default: 16.
  int max_subscribers = 16;
  // A change stream whose follower takes no batch for this long is
  // cancelled (the follower sees CANCELLED; the shard logs why), releasing
  // what it holds. Default: 60 s.
  absl::Duration subscriber_stall_timeout = absl::Seconds(60);
  // A bucket move pauses pushes to its buckets for its last catch-up and
  // the map change; past this the pause ends by itself (its driver died)
  // and the move must begin again. Default: 10 s.
  absl::Duration max_move_pause = absl::Seconds(10);
  // Whether a pull may ask for its answer in the shared memory of a client
  // on this machine (v1::SharedAnswer), and how many clients' memories the
  // shard maps at once (more are answered over gRPC). Defaults: true, 64.
  bool shared_memory_answers = true;
  size_t max_shared_memories = 64;
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
};

// The gRPC adapter of one training shard: checks what arrives from the
// network (sizes, finiteness, key ownership), calls the store, and turns
// its status into a gRPC status. Thread-safe.
// Pull is served raw: its answer is written straight into gRPC's send buffer
// (common/pull_wire.h) instead of going through a protobuf message.
class ShardService final
    : public v1::ParameterServer::WithRawCallbackMethod_CreateTable<
          v1::ParameterServer::WithRawCallbackMethod_ListTables<
              v1::ParameterServer::WithRawCallbackMethod_Pull<
                  v1::ParameterServer::WithRawCallbackMethod_Push<
                      v1::ParameterServer::WithRawCallbackMethod_Checkpoint<
                          v1::ParameterServer::WithRawCallbackMethod_Restore<
                              v1::ParameterServer::WithRawCallbackMethod_Stats<
                                  v1::ParameterServer::WithRawCallbackMethod_GetShardMap<
                                      v1::ParameterServer::
                                          WithRawCallbackMethod_SetShardMap<
                                              v1::ParameterServer::
                                                  WithRawCallbackMethod_MoveBuckets<
                                                      v1::ParameterServer::
                                                          CallbackService>>>>>>>>>> {
 public:
  explicit ShardService(const ShardServiceOptions& options);
  // Finishes the data path calls still queued (as expired or served).
  ~ShardService() override;

  // The unary methods are served raw (serialized bytes in and out), so that
  // a request that does not parse gets INVALID_ARGUMENT naming the method.
  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListTables(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetShardMap(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetShardMap(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* MoveBuckets(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<v1::ChangeBatch>* Subscribe(
      grpc::CallbackServerContext* context,
      const v1::SubscribeRequest* request) override;

  const RequestMetrics& metrics() const { return metrics_; }
  // Clients' shared memories mapped for pull answers now.
  size_t shared_memories() const;
  // The map this shard serves by now.
  std::shared_ptr<const ShardMap> shard_map() const;

  // The domain logic of each RPC, without gRPC; public for tests.
  absl::Status DoCreateTable(const v1::CreateTableRequest& request,
                             v1::CreateTableResponse& response);
  // The serialized PullResponse: the rows, or where in the client's shared
  // memory they were written. Sets `shared_refusal` (when given) to why the
  // request's shared memory could not be used at all.
  absl::StatusOr<grpc::ByteBuffer> DoPull(
      const v1::PullRequest& request, std::string* shared_refusal = nullptr);
  absl::Status DoPush(const v1::PushRequest& request,
                      v1::PushResponse& response);
  absl::Status DoSetShardMap(const v1::SetShardMapRequest& request,
                             v1::SetShardMapResponse& response);
  // One step of a bucket move (shard_service_moves.cc).
  absl::Status DoMoveBuckets(const v1::MoveBucketsRequest& request,
                             v1::MoveBucketsResponse& response);
  // Decodes and applies a checked push under `id`; returns whether it was a
  // duplicate.
  absl::StatusOr<bool> ApplyPush(const v1::PushRequest& request,
                                 const PushId& id);

 private:
  // Looks the rows of every batch up into `writer`.
  absl::Status LookUpInto(const v1::PullRequest& request,
                          absl::Span<const size_t> value_counts, bool fp16,
                          PullResponseWriter& writer);
  // Answers in the request's shared memory region: the small PullResponse
  // that says so, or nullopt when the answer does not fit the region or
  // the memory is refused (`refusal` then says why).
  absl::StatusOr<std::optional<grpc::ByteBuffer>> TryPullIntoSharedMemory(
      const v1::PullRequest& request, absl::Span<const size_t> value_counts,
      absl::Span<const size_t> value_bytes, bool fp16, std::string& refusal);

  // Runs `body`, records its outcome in the metrics and finishes the call.
  template <typename Body>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                ShardMethod method, Body body);
  // Run for a raw method: parses the request (INVALID_ARGUMENT naming the
  // method when it does not parse), runs body(request, response) and
  // serializes the response.
  template <typename Request, typename Response, typename Body>
  grpc::ServerUnaryReactor* RunTyped(grpc::CallbackServerContext* context,
                                     ShardMethod method,
                                     const grpc::ByteBuffer* request_bytes,
                                     grpc::ByteBuffer* response_bytes,
                                     Body body);
  // Like Run, but `body` runs on the request queue's threads (data path
  // calls, which shed load); it must capture what it uses by value.
  grpc::ServerUnaryReactor* RunQueued(grpc::CallbackServerContext* context,
                                      ShardMethod method,
                                      std::function<absl::Status()> body);

  // OK unless `method` needs the token and the call lacks it (see
  // ShardServiceOptions::auth_token).
  absl::Status Authorize(grpc::CallbackServerContext* context,
                         ShardMethod method) const;
  absl::Status CheckBatchSizes(
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches,
      const char* what) const;
  // Installs `map`, once no push is between its routing check and its
  // apply.
  void InstallMapLocked(std::shared_ptr<const ShardMap> map)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(set_map_mu_);
  // A request routed by a newer version than this shard's: looks for a newer
  // map in the shard map store (etcd), at most every 100 ms.
  void LookForNewerMap(uint64_t request_version);
  // FAILED_PRECONDITION carrying `map`'s version for a request routed by an
  // older version, or holding a key `map` gives another shard; UNAVAILABLE
  // (retry) for such a key when the request was routed by a newer version,
  // which this shard has not got yet.
  absl::Status CheckRouting(
      uint64_t request_version,
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches,
      const ShardMap& map) const;
  // Checkpoint under the current map (no map change meanwhile), recorded
  // beside the checkpoint.
  absl::StatusOr<CheckpointInfo> CheckpointUnderMap(
      const v1::CheckpointRequest& request);
  // A map of another shard count: the data directory's SHARD_PLACEMENT
  // records the new count (a restart must give it as --num_shards).
  absl::Status RecordShardCount(const ShardMap& current, const ShardMap& next);
  // FAILED_PRECONDITION when checkpoint `id` was taken under a map that
  // places buckets otherwise than the current one.
  absl::Status CheckRestorableMap(const std::string& id);
  // A replica that became primary may have missed map changes made while
  // it followed (SetShardMap reaches the primary): it reads the stored map
  // (etcd) once per term. UNAVAILABLE while it cannot.
  absl::Status CatchUpMapAfterPromotion();
  // The steps of a bucket move (shard_service_moves.cc).
  absl::Status BeginMove(const v1::MoveBucketsRequest& request,
                         v1::MoveBucketsResponse& response);
  absl::Status CopyMovingRows(const v1::MoveBucketsRequest& request,
                              v1::MoveBucketsResponse& response);
  absl::Status CatchUpMovingRows(const v1::MoveBucketsRequest& request,
                                 v1::MoveBucketsResponse& response);
  absl::Status ImportMovedRows(const v1::MoveBucketsRequest& request);
  absl::Status DropMovedRows(const v1::MoveBucketsRequest& request,
                             v1::MoveBucketsResponse& response);
  // FAILED_PRECONDITION naming the first bucket of `buckets` this shard
  // owns under its map.
  absl::Status CheckNotOwned(const std::vector<uint32_t>& buckets) const;
  // FAILED_PRECONDITION carrying the map's version, naming the first key
  // this shard does not own under `map`.
  absl::Status CheckOwnership(const v1::TableBatch& batch,
                              const ShardMap& map) const;

  ShardServiceOptions options_;
  absl::Time start_time_;
  mutable absl::Mutex map_mu_;
  std::shared_ptr<const ShardMap> map_ ABSL_GUARDED_BY(map_mu_);
  // Held shared by a push from its routing check through its apply, and
  // exclusively to replace the map.
  absl::Mutex push_gate_ ABSL_ACQUIRED_BEFORE(map_mu_);
  // Held across a map replacement's store write or read, so that two of
  // them do not interleave; the gate and map_mu_ only for the swap.
  absl::Mutex set_map_mu_ ABSL_ACQUIRED_BEFORE(push_gate_);
  // The replica group's term in which this primary last read the stored
  // map (0: never).
  std::atomic<uint64_t> map_read_in_term_{0};
  // When LookForNewerMap last read the store (Unix ns).
  std::atomic<int64_t> last_map_lookup_ns_{0};
  // What this shard knows of a move of its buckets to another shard.
  std::unique_ptr<server_internal::BucketMoveSource> moves_;
  // Null with shared_memory_answers off.
  std::unique_ptr<server_internal::SharedAnswers> shared_answers_;
  RequestMetrics metrics_;
  // Last member: destroyed first, finishing the calls it still holds.
  std::unique_ptr<WorkQueue> queue_;
  // Change streams open now; shared with each stream, which gives its slot
  // back when it ends.
  std::shared_ptr<std::atomic<int>> subscribers_ =
      std::make_shared<std::atomic<int>>(0);
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_SERVICE_H_
