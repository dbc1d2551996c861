// CreateGrpcRendezvousClient: the Rendezvous service of a training shard
// through a gRPC stub, with Get polling until its timeout.

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"
#include "worker/collective/rendezvous.h"

namespace strata {
namespace {

// Get's polls start this far apart and back off (doubling) to at most
// kMaxPollInterval: a key set right after the first poll is seen within a few
// milliseconds, and a rank waiting minutes for a slow peer costs the shard
// five calls a second.
constexpr absl::Duration kFirstPollInterval = absl::Milliseconds(5);
constexpr absl::Duration kMaxPollInterval = absl::Milliseconds(200);
// gRPC's own reconnect backoff (1 s growing to 120 s by default) would leave
// a shard that just came up unreached for long after it is there.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

class GrpcRendezvousClient final : public RendezvousClient {
 public:
  GrpcRendezvousClient(const RendezvousClientOptions& options,
                       std::shared_ptr<grpc::ChannelCredentials> credentials)
      : options_(options) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                kInitialReconnectBackoffMs);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
    stub_ = v1::Rendezvous::NewStub(
        grpc::CreateCustomChannel(options.address, credentials, args));
  }

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    v1::SetValueRequest request;
    request.set_key(std::string(key));
    request.set_value(std::string(value));
    absl::Status status =
        Call(options_.rpc_timeout, /*poll_not_found=*/false,
             [&](grpc::ClientContext* context) {
               v1::SetValueResponse response;
               return stub_->SetValue(context, request, &response);
             });
    if (status.ok()) return status;
    return absl::Status(
        status.code(),
        absl::StrCat("shard ", options_.address, ": setting rendezvous key '",
                     key, "' failed: ", status.message()));
  }

  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    v1::GetValueRequest request;
    request.set_key(std::string(key));
    v1::GetValueResponse response;
    absl::Status status = Call(
        timeout, /*poll_not_found=*/true, [&](grpc::ClientContext* context) {
          return stub_->GetValue(context, request, &response);
        });
    if (status.ok()) return std::move(*response.mutable_value());
    // The codes Call tries again come back only when the time ran out.
    const std::string waited =
        absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1)));
    switch (status.code()) {
      case absl::StatusCode::kNotFound:
        return absl::DeadlineExceededError(
            absl::StrCat("shard ", options_.address, ": rendezvous key '", key,
                         "' was not set within ", waited));
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kDeadlineExceeded:
        return absl::DeadlineExceededError(
            absl::StrCat("shard ", options_.address, ": rendezvous key '", key,
                         "' could not be read within ", waited,
                         "; last error: ", status.ToString()));
      default:
        return absl::Status(status.code(),
                            absl::StrCat("shard ", options_.address,
                                         ": getting rendezvous key '", key,
                                         "' failed: ", status.message()));
    }
  }

 private:
  // Makes `rpc` calls until one succeeds or fails for good, for up to
  // `timeout` (one call at least). UNAVAILABLE (the shard is not up, or
  // restarting), a call's own DEADLINE_EXCEEDED and, when `poll_not_found`,
  // NOT_FOUND are tried again after a pause. When the time runs out: the
  // last answer that says why (see below).
  //
  // After an UNAVAILABLE the next call waits for the connection (gRPC's
  // wait_for_ready) within its deadline. A call that fails at once leaves
  // no thread of this process polling the channel, and a connection to a
  // shard that came back up then completes only at gRPC's backup poll, up
  // to 5 s later: a Set right after a shard's restart ran out its time so.
  template <typename Rpc>
  absl::Status Call(absl::Duration timeout, bool poll_not_found, Rpc rpc) {
    Clock* clock = options_.clock;
    const absl::Time deadline = clock->Now() + timeout;
    absl::Duration pause = kFirstPollInterval;
    absl::Status last;
    bool wait_for_connection = false;
    for (bool first = true;; first = false) {
      absl::Duration left = deadline - clock->Now();
      absl::Duration call_timeout = std::min(options_.rpc_timeout, left);
      if (first && call_timeout <= absl::ZeroDuration()) {
        call_timeout = options_.rpc_timeout;  // A zero timeout asks once.
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           absl::ToChronoMilliseconds(call_timeout));
      context.set_wait_for_ready(wait_for_connection);
      AddBearerToken(options_.auth_token, context);
      const absl::Status status = FromGrpcStatus(rpc(&context));
      const absl::StatusCode code = status.code();
      const bool again =
          code == absl::StatusCode::kUnavailable ||
          code == absl::StatusCode::kDeadlineExceeded ||
          (poll_not_found && code == absl::StatusCode::kNotFound);
      if (!again) return status;
      // A DEADLINE_EXCEEDED of a call cut short by `timeout`, or of one that
      // waited for the connection, only says that the time ran out; the
      // answer before it (NOT_FOUND, or why the shard is unreachable) says
      // why.
      const bool cut_short = call_timeout < options_.rpc_timeout;
      if (last.ok() || code != absl::StatusCode::kDeadlineExceeded ||
          (!cut_short && !wait_for_connection)) {
        last = status;
      }
      wait_for_connection =
          code == absl::StatusCode::kUnavailable ||
          (wait_for_connection && code == absl::StatusCode::kDeadlineExceeded);
      left = deadline - clock->Now();
      if (left <= absl::ZeroDuration()) return last;
      clock->SleepFor(std::min(pause, left));
      pause = std::min(2 * pause, kMaxPollInterval);
    }
  }

  const RendezvousClientOptions options_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const RendezvousClientOptions& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("rendezvous: empty shard address");
  }
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: rpc_timeout must be positive, not ",
                     absl::FormatDuration(options.rpc_timeout)));
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("rendezvous: clock is null");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFromFiles(options.tls_ca_file,
                                  options.tls_client_cert_file,
                                  options.tls_client_key_file);
  if (!credentials.ok()) return credentials.status();
  return std::make_unique<GrpcRendezvousClient>(options,
                                                *std::move(credentials));
}

}  // namespace strata
