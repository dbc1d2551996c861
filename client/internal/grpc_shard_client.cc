#include <memory>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/shard_map.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace {

constexpr char kPullMethod[] = "/strata.v1.ParameterServer/Pull";

std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// Prefixes the shard's address so that a caller of a multi-shard client can
// tell which shard failed, and keeps the shard map version a refusal for
// another map carries in its trailing metadata.
absl::Status Annotate(const std::string& address, const grpc::Status& status,
                      const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  const std::string message =
      absl::StrCat("shard ", address, ": ", status.error_message());
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto found = trailers.find(kShardMapVersionMetadata);
      found != trailers.end() &&
      status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    uint64_t version = 0;
    if (absl::SimpleAtoi(
            absl::string_view(found->second.data(), found->second.size()),
            &version)) {
      return ShardMapMismatchError(message, version);
    }
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      message);
}

class GrpcShardClient final : public ShardClient {
 public:
  GrpcShardClient(const std::string& address,
                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                  const std::string& auth_token)
      : address_(address), auth_token_(auth_token) {
    if (credentials == nullptr) {
      credentials = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // Each client gets its own connection: clients in one process do not
    // queue behind each other on one socket.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(address, credentials, args);
    stub_ = v1::ParameterServer::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
  }

  const std::string& address() const override { return address_; }

  void PullAsync(const v1::PullRequest& request, grpc::ByteBuffer* response,
                 absl::Duration deadline, Done done) override {
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
    };
    auto* call = new Call();
    Prepare(call->context, deadline);
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<v1::PullRequest>::Serialize(
            request, &call->request, &own_buffer);
    if (!serialized.ok()) {
      done(Annotate(address_, serialized, call->context));
      delete call;
      return;
    }
    generic_->UnaryCall(
        &call->context, kPullMethod, grpc::StubOptions(), &call->request,
        response, [this, call, done](grpc::Status status) {
          absl::Status annotated = Annotate(address_, status, call->context);
          delete call;
          done(std::move(annotated));
        });
  }

  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration deadline, Done done) override {
    auto* context = new grpc::ClientContext();
    Prepare(*context, deadline);
    stub_->async()->Push(context, &request, response,
                         [this, context, done](grpc::Status status) {
                           absl::Status annotated =
                               Annotate(address_, status, *context);
                           delete context;
                           done(std::move(annotated));
                         });
  }

  absl::Status CreateTable(const v1::CreateTableRequest& request,
                           v1::CreateTableResponse* response,
                           absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->CreateTable(&context, request, response));
  }

  absl::Status ListTables(v1::ListTablesResponse* response,
                          absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->ListTables(&context, v1::ListTablesRequest(),
                                             response));
  }

  absl::Status Stats(v1::StatsResponse* response,
                     absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context,
                  stub_->Stats(&context, v1::StatsRequest(), response));
  }

  absl::Status Checkpoint(const v1::CheckpointRequest& request,
                          v1::CheckpointResponse* response,
                          absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->Checkpoint(&context, request, response));
  }

  absl::Status Restore(const v1::RestoreRequest& request,
                       v1::RestoreResponse* response,
                       absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->Restore(&context, request, response));
  }

  absl::Status GetShardMap(v1::ShardMap* response,
                           absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->GetShardMap(
                               &context, v1::GetShardMapRequest(), response));
  }

  absl::Status SetShardMap(const v1::SetShardMapRequest& request,
                           v1::SetShardMapResponse* response,
                           absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->SetShardMap(&context, request, response));
  }

  absl::Status MoveBuckets(const v1::MoveBucketsRequest& request,
                           v1::MoveBucketsResponse* response,
                           absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    return Finish(context, stub_->MoveBuckets(&context, request, response));
  }

  absl::Status CheckHealth(absl::Duration deadline) override {
    grpc::ClientContext context;
    Prepare(context, deadline);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    absl::Status status =
        Finish(context, health_->Check(&context, request, &response));
    if (status.ok() &&
        response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::UnavailableError(
          absl::StrCat("shard ", address_, " is not serving"));
    }
    return status;
  }

 private:
  absl::Status Finish(const grpc::ClientContext& context,
                      const grpc::Status& status) const {
    return Annotate(address_, status, context);
  }

  // Every call carries a deadline and, when configured, the bearer token.
  void Prepare(grpc::ClientContext& context, absl::Duration deadline) const {
    context.set_deadline(DeadlineFromNow(deadline));
    AddBearerToken(auth_token_, context);
  }

  std::string address_;
  std::string auth_token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace

absl::Status ShardClient::MoveBuckets(const v1::MoveBucketsRequest&,
                                      v1::MoveBucketsResponse*,
                                      absl::Duration) {
  return absl::UnimplementedError(absl::StrCat(
      "shard ", address(), " cannot move buckets through this client"));
}

std::unique_ptr<ShardClient> CreateGrpcShardClient(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::string& auth_token) {
  return std::make_unique<GrpcShardClient>(address, std::move(credentials),
                                           auth_token);
}

}  // namespace strata
