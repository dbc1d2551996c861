#ifndef STRATA_CLIENT_INTERNAL_SERVING_CLIENT_IMPL_H_
#define STRATA_CLIENT_INTERNAL_SERVING_CLIENT_IMPL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "client/serving_client.h"
#include "common/adaptive_concurrency_limit.h"
#include "common/adaptive_throttle.h"
#include "grpcpp/security/credentials.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace client_internal {

// ServingClient over one gRPC stub per replica. Thread-safe.
class ServingClientImpl final : public ServingClient {
 public:
  // ServingClient::Create.
  static absl::StatusOr<std::unique_ptr<ServingClient>> Create(
      const ServingClientOptions& options);

  absl::Status Lookup(absl::string_view table, absl::Span<const uint64_t> keys,
                      absl::Span<float> out, uint32_t* num_missing) override;
  absl::StatusOr<v1::ServingStatusResponse> Status() override;

 private:
  ServingClientImpl(const ServingClientOptions& options,
                    std::shared_ptr<grpc::ChannelCredentials> credentials);

  // Runs `call` on the next replica, again on UNAVAILABLE or
  // RESOURCE_EXHAUSTED, with backoff, until it succeeds, fails otherwise or
  // the retry deadline passes. An attempt the throttle refuses fails as a
  // server's refusal would, without a call.
  absl::Status WithRetries(
      const std::function<grpc::Status(v1::ServingService::Stub&,
                                       grpc::ClientContext&)>& call);

  ServingClientOptions options_;
  std::vector<std::unique_ptr<v1::ServingService::Stub>> stubs_;
  std::atomic<size_t> next_{0};
  // Null when options.throttle_k is 0.
  std::unique_ptr<AdaptiveThrottle> throttle_;
  // Null unless options.adaptive_concurrency_limit.
  std::unique_ptr<AdaptiveConcurrencyLimit> limit_;
};

}  // namespace client_internal
}  // namespace strata

#endif  // STRATA_CLIENT_INTERNAL_SERVING_CLIENT_IMPL_H_
