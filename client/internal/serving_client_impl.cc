#include "client/internal/serving_client_impl.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/fp16.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"

namespace strata {
namespace client_internal {

absl::StatusOr<std::unique_ptr<ServingClient>> ServingClientImpl::Create(
    const ServingClientOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("ServingClient needs an endpoint");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFromFiles(options.tls_ca_file,
                                  options.tls_client_cert_file,
                                  options.tls_client_key_file);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<ServingClient>(
      new ServingClientImpl(options, *std::move(credentials)));
}

ServingClientImpl::ServingClientImpl(
    const ServingClientOptions& options,
    std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(options) {
  if (options.throttle_k > 0) {
    AdaptiveThrottle::Options throttle;
    throttle.k = options.throttle_k;
    throttle.clock = options.clock;
    throttle_ = std::make_unique<AdaptiveThrottle>(throttle);
  }
  if (options.adaptive_concurrency_limit) {
    limit_ = std::make_unique<AdaptiveConcurrencyLimit>(
        AdaptiveConcurrencyLimit::Options());
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // A restarted replica is found within our backoff, not gRPC's.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  for (const std::string& endpoint : options.endpoints) {
    stubs_.push_back(v1::ServingService::NewStub(
        grpc::CreateCustomChannel(endpoint, credentials, args)));
  }
}

// A replica that answered UNAVAILABLE is called next with gRPC's
// wait_for_ready, within the call's deadline. A call that fails at once
// leaves no thread of this process polling the channel, and a connection to
// a replica that came back up then completes only at gRPC's backup poll, up
// to 5 s later: a process whose only traffic is this client missed a
// restarted replica for that long (as the rendezvous client did).
absl::Status ServingClientImpl::WithRetries(
    const std::function<grpc::Status(v1::ServingService::Stub&,
                                     grpc::ClientContext&)>& call) {
  const absl::Time give_up = options_.clock->Now() + options_.retry_deadline;
  absl::Duration backoff = options_.initial_backoff;
  std::vector<bool> wait_for_connection(stubs_.size(), false);
  absl::Status unreachable;  // why the last unreachable replica was
  while (true) {
    const size_t replica = next_.fetch_add(1) % stubs_.size();
    if (throttle_ != nullptr && !throttle_->Allow()) {
      // Ends the call: retrying would only draw again until one draw let
      // it through, and the throttle would then hold back almost nothing.
      return absl::ResourceExhaustedError(
          "throttled by the client: the serving replicas refuse calls for "
          "overload (ServingClientOptions::throttle_k)");
    }
    std::optional<AdaptiveConcurrencyLimit::Ticket> ticket;
    if (limit_ != nullptr && !(ticket = limit_->TryAcquire())) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "limited by the client: ", limit_->in_flight(),
          " calls of this client are in flight to the serving replicas, "
          "its bound while they refuse calls for overload "
          "(ServingClientOptions::adaptive_concurrency_limit)"));
    }
    const bool waits = wait_for_connection[replica];
    grpc::ClientContext context;
    absl::Duration timeout = options_.rpc_timeout;
    if (waits) {
      timeout = std::max(std::min(timeout, give_up - options_.clock->Now()),
                         absl::Milliseconds(1));
    }
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(timeout));
    context.set_wait_for_ready(waits);
    AddBearerToken(options_.auth_token, context);
    const grpc::Status status = call(*stubs_[replica], context);
    const bool accepted =
        AcceptedByServer(static_cast<absl::StatusCode>(status.error_code()));
    if (throttle_ != nullptr) throttle_->Record(accepted);
    if (ticket.has_value()) limit_->Release(*ticket, accepted);
    if (status.ok()) return absl::OkStatus();
    absl::Status error(static_cast<absl::StatusCode>(status.error_code()),
                       absl::StrCat("serving ", options_.endpoints[replica],
                                    ": ", status.error_message()));
    // Still no connection at the end of a wait: the replica is as
    // unreachable as before, for the reason it gave then.
    const bool still_unreachable =
        waits && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      unreachable = error;
    } else if (still_unreachable && !unreachable.ok()) {
      error = unreachable;
    }
    wait_for_connection[replica] =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        still_unreachable;
    // Down or overloaded: retried with backoff on the next replica.
    const bool retryable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
        still_unreachable;
    if (!retryable || options_.clock->Now() + backoff > give_up) {
      return error;
    }
    options_.clock->SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::Status ServingClientImpl::Lookup(absl::string_view table,
                                       absl::Span<const uint64_t> keys,
                                       absl::Span<float> out,
                                       uint32_t* num_missing) {
  if (keys.empty()) return absl::InvalidArgumentError("Lookup of no keys");
  if (out.size() % keys.size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("output of ", out.size(), " floats for ", keys.size(),
                     " keys: not a whole number of rows"));
  }
  const size_t dim = out.size() / keys.size();
  v1::LookupRequest request;
  request.set_table(std::string(table));
  request.mutable_keys()->Add(keys.begin(), keys.end());
  if (options_.fp16_values) request.set_encoding(v1::FLOAT16);
  v1::LookupResponse response;
  absl::Status status = WithRetries(
      [&](v1::ServingService::Stub& stub, grpc::ClientContext& context) {
        response.Clear();
        return stub.Lookup(&context, request, &response);
      });
  if (!status.ok()) return status;
  const size_t values = options_.fp16_values
                            ? response.values_fp16().size() / sizeof(uint16_t)
                            : static_cast<size_t>(response.values_size());
  if (response.dim() != dim || values != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table, "' has dimension ", response.dim(), ", not ", dim,
        " (output of ", out.size(), " floats for ", keys.size(), " keys)"));
  }
  if (options_.fp16_values) {
    HalvesToFloats(
        reinterpret_cast<const uint16_t*>(response.values_fp16().data()),
        out.size(), out.data());
  } else {
    std::copy(response.values().begin(), response.values().end(), out.begin());
  }
  if (num_missing != nullptr) *num_missing = response.num_missing();
  return absl::OkStatus();
}

absl::StatusOr<v1::ServingStatusResponse> ServingClientImpl::Status() {
  v1::ServingStatusResponse response;
  absl::Status status = WithRetries(
      [&](v1::ServingService::Stub& stub, grpc::ClientContext& context) {
        response.Clear();
        return stub.Status(&context, v1::ServingStatusRequest(), &response);
      });
  if (!status.ok()) return status;
  return response;
}

}  // namespace client_internal

absl::StatusOr<std::unique_ptr<ServingClient>> ServingClient::Create(
    const ServingClientOptions& options) {
  return client_internal::ServingClientImpl::Create(options);
}

}  // namespace strata
