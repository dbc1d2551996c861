#ifndef STRATA_SERVER_RENDEZVOUS_SERVICE_H_
#define STRATA_SERVER_RENDEZVOUS_SERVICE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "proto/strata.grpc.pb.h"

namespace strata {

namespace server_internal {
class RendezvousStore;
}  // namespace server_internal

struct RendezvousServiceOptions {
  // When not empty, SetValue and GetValue need "authorization: Bearer
  // <auth_token>" metadata (the rendezvous is internal to a job, so reads
  // are not open either). Default: empty (no check).
  std::string auth_token;
  // Longest key; keys are never empty. Default: 256 bytes.
  size_t max_key_bytes = 256;
  // Longest value. Default: 1 MiB.
  size_t max_value_bytes = size_t{1} << 20;
  // Keys held; RESOURCE_EXHAUSTED for a new key beyond. Default: 100,000.
  size_t max_keys = 100000;
  // Bytes of keys and values held together, so that the values cannot take
  // the shard's memory (100,000 values of 1 MiB would be 100 GiB).
  // Default: 256 MiB.
  size_t max_total_bytes = size_t{256} << 20;
};

// The Rendezvous service of a training shard: a bounded in-memory key-value
// store through which the ranks of a training job find each other (see
// worker/collective/rendezvous.h for the client). GetValue never blocks:
// it answers NOT_FOUND for a key not set yet, and the client polls.
// Thread-safe.
//
// Its requests are counted apart from the ParameterServer's RequestMetrics:
// the NOT_FOUND answers of polling clients are normal, and must not show as
// failed requests of the shard.
//
// Example (next to the ParameterServer service on the same port):
//   RendezvousServiceOptions options;
//   options.auth_token = token;
//   RendezvousService rendezvous(options);
//   StartGrpcServer(host, port, {&shard_service, &rendezvous}, &bound_port);
class RendezvousService final : public v1::Rendezvous::CallbackService {
 public:
  enum class Method { kSetValue, kGetValue };

  explicit RendezvousService(const RendezvousServiceOptions& options);
  ~RendezvousService() override;
  RendezvousService(const RendezvousService&) = delete;
  RendezvousService& operator=(const RendezvousService&) = delete;

  grpc::ServerUnaryReactor* SetValue(grpc::CallbackServerContext* context,
                                     const v1::SetValueRequest* request,
                                     v1::SetValueResponse* response) override;
  grpc::ServerUnaryReactor* GetValue(grpc::CallbackServerContext* context,
                                     const v1::GetValueRequest* request,
                                     v1::GetValueResponse* response) override;

  // Calls of `method` answered with `code`.
  uint64_t requests(Method method, absl::StatusCode code) const;
  size_t num_keys() const;

  // Its /metrics families: strata_rendezvous_requests_total{method,code} and
  // the keys and bytes held.
  void AddMetrics(MetricFamilies* families) const;

 private:
  static constexpr size_t kNumMethods = 2;
  static constexpr size_t kNumCodes = 17;

  // Checks the token, runs `body`, counts its outcome and finishes the call.
  template <typename Body>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                Method method, Body body);

  const RendezvousServiceOptions options_;
  const std::unique_ptr<server_internal::RendezvousStore> store_;
  std::array<std::array<std::atomic<uint64_t>, kNumCodes>, kNumMethods>
      counts_{};
};

}  // namespace strata

#endif  // STRATA_SERVER_RENDEZVOUS_SERVICE_H_
