#ifndef STRATA_TENSORFLOW_PS_CONNECTION_H_
#define STRATA_TENSORFLOW_PS_CONNECTION_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/client_library.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/strata_tf_client.h"

namespace strata {

// The connection attributes every Strata op has (see strata_ops.cc).
struct ConnectionOptions {
  std::string shards;  // "host:port,host:port", in shard order
  float rpc_timeout_s = 10;
  float retry_deadline_s = 30;
  std::string tls_ca_file;
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  std::string auth_token_file;
  bool wire_float16 = false;  // rows and gradients as half floats
  // `shards` are strata-serving replicas, not training shards (set by the
  // kernel: no attribute says it).
  bool serving = false;

  // Reads the attributes of the kernel being constructed.
  static absl::StatusOr<ConnectionOptions> FromAttrs(
      tensorflow::OpKernelConstruction* context);
  // Names the connection in a ResourceMgr: equal options, equal names.
  std::string Key() const;
};

// One client of the training PS, or of the serving PS when options.serving
// (a StrataTfClient of the client library),
// shared by all kernels with the same ConnectionOptions through the device's
// ResourceMgr, so that they share channels. Thread-safe. Reference counted
// (tensorflow::ResourceBase); destroys the client with its last reference.
class PsConnection : public tensorflow::ResourceBase {
 public:
  // The connection for `options` in the resource manager of the kernel
  // being constructed, made on first use. The caller owns one reference.
  static absl::StatusOr<PsConnection*> Acquire(
      tensorflow::OpKernelConstruction* context,
      const ConnectionOptions& options);

  ~PsConnection() override;
  std::string DebugString() const override;

  // Errors carry the PS's code and message, prefixed with what was done.
  absl::Status CreateTable(const StrataTfTableConfig& config);
  // Rows of `keys` (num_keys * dim floats) into `out`.
  absl::Status Pull(const std::string& table, const uint64_t* keys,
                    size_t num_keys, size_t dim, float* out);
  // Rows of `keys` from the serving PS (a connection with options.serving).
  absl::Status ServingLookup(const std::string& table, const uint64_t* keys,
                             size_t num_keys, size_t dim, float* out);
  // Applies num_keys * dim gradients to the rows of `keys` (unique keys).
  absl::Status Push(const std::string& table, const uint64_t* keys,
                    size_t num_keys, size_t dim, const float* gradients);
  // Push in the background, at most `max_pending` (>= 1) of the table
  // queued or running (strata_tf_push_async); the error of an earlier
  // background push that failed, if any.
  absl::Status PushAsync(const std::string& table, const uint64_t* keys,
                         size_t num_keys, size_t dim, const float* gradients,
                         int max_pending);
  // Waits for every background push; the error of one that failed.
  absl::Status WaitForPushes();

 private:
  PsConnection(const ClientLibrary* library, StrataTfClient* client,
               std::string shards)
      : library_(library), client_(client), shards_(std::move(shards)) {}

  const ClientLibrary* const library_;
  StrataTfClient* const client_;
  const std::string shards_;
};

}  // namespace strata

#endif  // STRATA_TENSORFLOW_PS_CONNECTION_H_
