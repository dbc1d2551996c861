#include "server/rendezvous_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "server/internal/rendezvous_store.h"

namespace strata {

namespace {

const char* MethodName(RendezvousService::Method method) {
  return method == RendezvousService::Method::kSetValue ? "SetValue"
                                                        : "GetValue";
}

server_internal::RendezvousStoreLimits LimitsOf(
    const RendezvousServiceOptions& options) {
  server_internal::RendezvousStoreLimits limits;
  limits.max_key_bytes = options.max_key_bytes;
  limits.max_value_bytes = options.max_value_bytes;
  limits.max_keys = options.max_keys;
  limits.max_total_bytes = options.max_total_bytes;
  return limits;
}

}  // namespace

RendezvousService::RendezvousService(const RendezvousServiceOptions& options)
    : options_(options),
      store_(std::make_unique<server_internal::RendezvousStore>(
          LimitsOf(options))) {}

RendezvousService::~RendezvousService() = default;

template <typename Body>
grpc::ServerUnaryReactor* RendezvousService::Run(
    grpc::CallbackServerContext* context, Method method, Body body) {
  // Both methods need the token: the values are a job's internal addresses.
  absl::Status status = CheckBearerToken(
      context->client_metadata(), options_.auth_token, MethodName(method));
  if (status.ok()) status = body();
  size_t code = static_cast<size_t>(status.code());
  if (code >= kNumCodes) code = static_cast<size_t>(absl::StatusCode::kUnknown);
  counts_[static_cast<size_t>(method)][code].fetch_add(
      1, std::memory_order_relaxed);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::SetValue(
    grpc::CallbackServerContext* context, const v1::SetValueRequest* request,
    v1::SetValueResponse*) {
  return Run(context, Method::kSetValue,
             [&] { return store_->Set(request->key(), request->value()); });
}

grpc::ServerUnaryReactor* RendezvousService::GetValue(
    grpc::CallbackServerContext* context, const v1::GetValueRequest* request,
    v1::GetValueResponse* response) {
  return Run(context, Method::kGetValue, [&]() -> absl::Status {
    absl::StatusOr<std::string> value = store_->Get(request->key());
    if (!value.ok()) return value.status();
    *response->mutable_value() = *std::move(value);
    return absl::OkStatus();
  });
}

uint64_t RendezvousService::requests(Method method,
                                     absl::StatusCode code) const {
  const size_t c = static_cast<size_t>(code);
  if (c >= kNumCodes) return 0;
  return counts_[static_cast<size_t>(method)][c].load(
      std::memory_order_relaxed);
}

size_t RendezvousService::num_keys() const { return store_->num_keys(); }

void RendezvousService::AddMetrics(MetricFamilies* families) const {
  prometheus::MetricFamily& requests_family = AddFamily(
      families, "strata_rendezvous_requests_total",
      "Rendezvous RPCs handled, by method and status code (NOT_FOUND answers "
      "a poll for a key not set yet).",
      prometheus::MetricType::Counter);
  for (Method method : {Method::kSetValue, Method::kGetValue}) {
    for (size_t c = 0; c < kNumCodes; ++c) {
      const absl::StatusCode code = static_cast<absl::StatusCode>(c);
      const uint64_t n = requests(method, code);
      if (n == 0 && code != absl::StatusCode::kOk) continue;
      AddSample(requests_family,
                {{"method", MethodName(method)},
                 {"code", absl::StatusCodeToString(code)}},
                static_cast<double>(n));
    }
  }
  AddGauge(families, "strata_rendezvous_keys",
           "Keys the rendezvous store holds.",
           static_cast<double>(store_->num_keys()));
  AddGauge(families, "strata_rendezvous_bytes",
           "Bytes of keys and values the rendezvous store holds.",
           static_cast<double>(store_->total_bytes()));
}

}  // namespace strata
