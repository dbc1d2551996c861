#include "server/replication/replication_service.h"

#include <utility>

#include "common/auth.h"
#include "common/grpc_status.h"
#include "server/replication/replica_group.h"

namespace strata {

ReplicationService::ReplicationService(ReplicaGroup* group,
                                       std::string auth_token)
    : group_(group), auth_token_(std::move(auth_token)) {}

grpc::Status ReplicationService::Authorize(grpc::ServerContext* context,
                                           const char* method) const {
  return ToGrpcStatus(
      CheckBearerToken(context->client_metadata(), auth_token_, method));
}

grpc::Status ReplicationService::Append(grpc::ServerContext* context,
                                        const v1::AppendRequest* request,
                                        v1::AppendResponse* response) {
  if (grpc::Status s = Authorize(context, "Append"); !s.ok()) return s;
  absl::StatusOr<v1::AppendResponse> answer = group_->HandleAppend(*request);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *response = std::move(*answer);
  return grpc::Status::OK;
}

grpc::Status ReplicationService::InstallSnapshot(
    grpc::ServerContext* context, grpc::ServerReader<v1::SnapshotChunk>* reader,
    v1::InstallSnapshotResponse* response) {
  if (grpc::Status s = Authorize(context, "InstallSnapshot"); !s.ok()) return s;
  absl::StatusOr<v1::InstallSnapshotResponse> answer =
      group_->HandleInstallSnapshot(reader);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *response = std::move(*answer);
  return grpc::Status::OK;
}

grpc::Status ReplicationService::GetPosition(
    grpc::ServerContext* context, const v1::GetPositionRequest*,
    v1::GetPositionResponse* response) {
  if (grpc::Status s = Authorize(context, "GetPosition"); !s.ok()) return s;
  *response = group_->Position();
  return grpc::Status::OK;
}

}  // namespace strata
