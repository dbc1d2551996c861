#ifndef STRATA_TESTS_TESTING_FORWARDING_SHARD_CLIENT_H_
#define STRATA_TESTS_TESTING_FORWARDING_SHARD_CLIENT_H_

#include <memory>
#include <string>
#include <utility>

#include "client/shard_client.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/strata.pb.h"

namespace strata {
namespace testing {

// A ShardClient that forwards every call to another one: tests derive from
// it to change one call (a lost answer, a refusal) and keep the rest real.
class ForwardingShardClient : public ShardClient {
 public:
  // Forwards to `target`, which must outlive this client.
  explicit ForwardingShardClient(ShardClient* target) : target_(target) {}
  // Forwards to `owned`, kept with this client.
  explicit ForwardingShardClient(std::unique_ptr<ShardClient> owned)
      : owned_(std::move(owned)), target_(owned_.get()) {}

  const std::string& address() const override { return target_->address(); }
  void PullAsync(const v1::PullRequest& request, grpc::ByteBuffer* response,
                 absl::Duration deadline, Done done) override {
    target_->PullAsync(request, response, deadline, std::move(done));
  }
  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration deadline, Done done) override {
    target_->PushAsync(request, response, deadline, std::move(done));
  }
  absl::Status CreateTable(const v1::CreateTableRequest& request,
                           v1::CreateTableResponse* response,
                           absl::Duration deadline) override {
    return target_->CreateTable(request, response, deadline);
  }
  absl::Status ListTables(v1::ListTablesResponse* response,
                          absl::Duration deadline) override {
    return target_->ListTables(response, deadline);
  }
  absl::Status Stats(v1::StatsResponse* response,
                     absl::Duration deadline) override {
    return target_->Stats(response, deadline);
  }
  absl::Status Checkpoint(const v1::CheckpointRequest& request,
                          v1::CheckpointResponse* response,
                          absl::Duration deadline) override {
    return target_->Checkpoint(request, response, deadline);
  }
  absl::Status Restore(const v1::RestoreRequest& request,
                       v1::RestoreResponse* response,
                       absl::Duration deadline) override {
    return target_->Restore(request, response, deadline);
  }
  absl::Status GetShardMap(v1::ShardMap* response,
                           absl::Duration deadline) override {
    return target_->GetShardMap(response, deadline);
  }
  absl::Status SetShardMap(const v1::SetShardMapRequest& request,
                           v1::SetShardMapResponse* response,
                           absl::Duration deadline) override {
    return target_->SetShardMap(request, response, deadline);
  }
  absl::Status MoveBuckets(const v1::MoveBucketsRequest& request,
                           v1::MoveBucketsResponse* response,
                           absl::Duration deadline) override {
    return target_->MoveBuckets(request, response, deadline);
  }
  absl::Status CheckHealth(absl::Duration deadline) override {
    return target_->CheckHealth(deadline);
  }

 protected:
  ShardClient& target() { return *target_; }

 private:
  std::unique_ptr<ShardClient> owned_;
  ShardClient* target_;
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_FORWARDING_SHARD_CLIENT_H_
