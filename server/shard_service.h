#ifndef STRATA_SERVER_SHARD_SERVICE_H_
#define STRATA_SERVER_SHARD_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "embedding/embedding_store.h"
#include "proto/strata.grpc.pb.h"
#include "server/request_metrics.h"

namespace strata {

struct ShardServiceOptions {
  // The store this shard serves; not owned, must outlive the service.
  EmbeddingStore* store = nullptr;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
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
  uint64_t max_response_bytes = (uint64_t{512} << 20) - (uint64_t{16} << 20);
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
};

// The gRPC adapter of one training shard: checks what arrives from the
// network (sizes, finiteness, key ownership), calls the store, and turns
// its status into a gRPC status. Thread-safe.
// Pull is served raw: its answer is written straight into gRPC's send buffer
// (common/pull_wire.h) instead of going through a protobuf message.
class ShardService final
    : public v1::ParameterServer::WithRawCallbackMethod_Pull<
          v1::ParameterServer::CallbackService> {
 public:
  explicit ShardService(const ShardServiceOptions& options);

  grpc::ServerUnaryReactor* CreateTable(
      grpc::CallbackServerContext* context,
      const v1::CreateTableRequest* request,
      v1::CreateTableResponse* response) override;
  grpc::ServerUnaryReactor* ListTables(
      grpc::CallbackServerContext* context,
      const v1::ListTablesRequest* request,
      v1::ListTablesResponse* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const v1::PushRequest* request,
                                 v1::PushResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(
      grpc::CallbackServerContext* context,
      const v1::CheckpointRequest* request,
      v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context,
                                    const v1::RestoreRequest* request,
                                    v1::RestoreResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;
  grpc::ServerWriteReactor<v1::ChangeBatch>* Subscribe(
      grpc::CallbackServerContext* context,
      const v1::SubscribeRequest* request) override;

  const RequestMetrics& metrics() const { return metrics_; }

  // The domain logic of each RPC, without gRPC; public for tests.
  absl::Status DoCreateTable(const v1::CreateTableRequest& request,
                             v1::CreateTableResponse& response);
  // The serialized PullResponse.
  absl::StatusOr<grpc::ByteBuffer> DoPull(const v1::PullRequest& request);
  absl::Status DoPush(const v1::PushRequest& request,
                      v1::PushResponse& response);

 private:
  // Runs `body`, records its outcome in the metrics and finishes the call.
  template <typename Body>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                ShardMethod method, Body body);

  // OK unless `method` needs the token and the call lacks it (see
  // ShardServiceOptions::auth_token).
  absl::Status Authorize(grpc::CallbackServerContext* context,
                         ShardMethod method) const;
  absl::Status CheckBatchSizes(
      const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches,
      const char* what) const;
  // FAILED_PRECONDITION naming the first key this shard does not own.
  absl::Status CheckOwnership(const v1::TableBatch& batch) const;

  ShardServiceOptions options_;
  absl::Time start_time_;
  RequestMetrics metrics_;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_SERVICE_H_
