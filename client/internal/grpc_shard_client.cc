#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "client/internal/shared_answer_slots.h"
#include "client/shard_client.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/pull_wire.h"
#include "common/shard_map.h"
#include "common/shared_memory.h"
#include "common/status_macros.h"
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

// A serialized PullResponse that only says where the answer is.
constexpr size_t kMostSharedAnswerBytes = 32;

using client_internal::SharedAnswerSlots;

// What a grpc::Slice over a slot holds: the slot goes back when gRPC
// drops the slice.
struct SlotHold {
  std::shared_ptr<SharedAnswerSlots> slots;
  size_t slot;
};

void ReleaseSlotHold(void* hold) {
  auto* held = static_cast<SlotHold*>(hold);
  held->slots->Release(held->slot);
  delete held;
}

class GrpcShardClient final : public ShardClient {
 public:
  GrpcShardClient(const std::string& address,
                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                  const std::string& auth_token,
                  const SharedMemoryPullOptions& shared_memory)
      : address_(address), auth_token_(auth_token) {
    if (shared_memory.enabled && IsLoopbackAddress(address)) {
      absl::StatusOr<std::shared_ptr<SharedAnswerSlots>> slots =
          SharedAnswerSlots::Create(shared_memory.slots,
                                    shared_memory.slot_bytes);
      if (slots.ok()) {
        shared_slots_ = *std::move(slots);
      } else {
        STRATA_LOG(WARNING, "client")
            << "shard " << address
            << ": pulls go over gRPC only: " << slots.status().message();
      }
    }
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
      std::shared_ptr<SharedAnswerSlots> slots;  // Null: over gRPC only.
      size_t slot = 0;
    };
    auto* call = new Call();
    Prepare(call->context, deadline);
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<v1::PullRequest>::Serialize(
            request, &call->request, &own_buffer);
    if (serialized.ok()) serialized = OfferSharedSlot(*call);
    if (!serialized.ok()) {
      done(Annotate(address_, serialized, call->context));
      delete call;
      return;
    }
    generic_->UnaryCall(
        &call->context, kPullMethod, grpc::StubOptions(), &call->request,
        response, [this, call, response, done](grpc::Status status) {
          absl::Status annotated = Annotate(address_, status, call->context);
          if (call->slots != nullptr) {
            TakeSharedAnswer(*call, annotated.ok(), response);
          }
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
  // Adds a free slot of the shared memory to a serialized pull request (a
  // field appended to a serialized message is that field set), when the
  // shard is on this machine and has not refused it.
  template <typename Call>
  grpc::Status OfferSharedSlot(Call& call) {
    std::shared_ptr<SharedAnswerSlots> slots = SharedSlots();
    if (slots == nullptr) return grpc::Status::OK;
    std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
    if (!offer.has_value()) return grpc::Status::OK;
    std::vector<grpc::Slice> pieces;
    grpc::Status dumped = call.request.Dump(&pieces);
    if (!dumped.ok()) {
      slots->Abandon(offer->slot);
      return dumped;
    }
    pieces.emplace_back(std::move(offer->request_field));
    call.request = grpc::ByteBuffer(pieces.data(), pieces.size());
    call.slots = std::move(slots);
    call.slot = offer->slot;
    return grpc::Status::OK;
  }

  // After a pull that offered a slot: points `response` at the answer in
  // the slot when the shard wrote it there (the slot is freed with the
  // response), or frees the slot.
  template <typename Call>
  void TakeSharedAnswer(Call& call, bool ok, grpc::ByteBuffer* response) {
    if (!ok) {
      // The shard may not be done with the slot (a deadline passed while
      // it wrote): the slot waits for it.
      call.slots->Abandon(call.slot);
      return;
    }
    auto hold = std::make_unique<SlotHold>(SlotHold{call.slots, call.slot});
    const auto& trailers = call.context.GetServerTrailingMetadata();
    if (auto refusal = trailers.find(kSharedAnswerRefusalMetadata);
        refusal != trailers.end()) {
      StopSharing(std::string(refusal->second.data(), refusal->second.size()));
    }
    uint64_t shared_bytes = 0;
    if (response->Length() <= kMostSharedAnswerBytes) {
      std::vector<grpc::Slice> pieces;
      std::string bytes;
      if (response->Dump(&pieces).ok()) {
        for (const grpc::Slice& piece : pieces) {
          bytes.append(reinterpret_cast<const char*>(piece.begin()),
                       piece.size());
        }
      }
      v1::PullResponse parsed;
      if (parsed.ParseFromString(bytes)) {
        shared_bytes = parsed.shared_answer_bytes();
      }
    }
    if (shared_bytes == 0 || shared_bytes > call.slots->answer_capacity()) {
      // Answered over gRPC (or a length that cannot be: then the response
      // reads as a malformed answer, not as bytes past the slot).
      ReleaseSlotHold(hold.release());
      return;
    }
    // The slice only reads the slot; gRPC's type is not const.
    auto* data = const_cast<uint8_t*>(call.slots->answer_data(call.slot));
    grpc::Slice answer(data, static_cast<size_t>(shared_bytes),
                       &ReleaseSlotHold, hold.release());
    *response = grpc::ByteBuffer(&answer, 1);
  }

  std::shared_ptr<SharedAnswerSlots> SharedSlots() {
    absl::MutexLock lock(&shared_mu_);
    return shared_slots_;
  }

  void StopSharing(const std::string& why) {
    absl::MutexLock lock(&shared_mu_);
    if (shared_slots_ == nullptr) return;
    shared_slots_.reset();
    STRATA_LOG(INFO, "client")
        << "shard " << address_ << " answers pulls over gRPC only: " << why;
  }

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
  absl::Mutex shared_mu_;
  // Null when pulls go over gRPC only.
  std::shared_ptr<SharedAnswerSlots> shared_slots_ ABSL_GUARDED_BY(shared_mu_);
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
    const std::string& auth_token,
    const SharedMemoryPullOptions& shared_memory) {
  return std::make_unique<GrpcShardClient>(address, std::move(credentials),
                                           auth_token, shared_memory);
}

bool IsLoopbackAddress(const std::string& address) {
  absl::string_view target = address;
  if (absl::StartsWith(target, "unix:")) return true;
  absl::ConsumePrefix(&target, "dns:///");
  absl::ConsumePrefix(&target, "ipv4:");
  absl::ConsumePrefix(&target, "ipv6:");
  // The host, without the port.
  absl::string_view host = target;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace strata
