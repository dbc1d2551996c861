#ifndef STRATA_SERVER_REPLICATION_REPLICATION_SERVICE_H_
#define STRATA_SERVER_REPLICATION_REPLICATION_SERVICE_H_

#include <string>

#include "proto/replication.grpc.pb.h"

namespace strata {

class ReplicaGroup;

// The gRPC adapter of a replica's Replication service (what its primary
// calls). With an auth token, every call needs it. Thread-safe.
class ReplicationService final : public v1::Replication::Service {
 public:
  // `group` is not owned and must outlive the service.
  ReplicationService(ReplicaGroup* group, std::string auth_token);

  grpc::Status Append(grpc::ServerContext* context,
                      const v1::AppendRequest* request,
                      v1::AppendResponse* response) override;
  grpc::Status InstallSnapshot(grpc::ServerContext* context,
                               grpc::ServerReader<v1::SnapshotChunk>* reader,
                               v1::InstallSnapshotResponse* response) override;
  grpc::Status GetPosition(grpc::ServerContext* context,
                           const v1::GetPositionRequest* request,
                           v1::GetPositionResponse* response) override;

 private:
  grpc::Status Authorize(grpc::ServerContext* context,
                         const char* method) const;

  ReplicaGroup* const group_;
  const std::string auth_token_;
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_REPLICATION_SERVICE_H_
