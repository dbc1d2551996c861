#include "tensorflow/ps_connection.h"

#include <string>
#include <utility>

namespace strata {

absl::StatusOr<ConnectionOptions> ConnectionOptions::FromAttrs(
    tensorflow::OpKernelConstruction* context) {
  ConnectionOptions options;
  for (absl::Status s :
       {context->GetAttr("shards", &options.shards),
        context->GetAttr("rpc_timeout_s", &options.rpc_timeout_s),
        context->GetAttr("retry_deadline_s", &options.retry_deadline_s),
        context->GetAttr("tls_ca_file", &options.tls_ca_file),
        context->GetAttr("tls_client_cert_file", &options.tls_client_cert_file),
        context->GetAttr("tls_client_key_file", &options.tls_client_key_file),
        context->GetAttr("auth_token_file", &options.auth_token_file),
        context->GetAttr("wire_float16", &options.wire_float16)}) {
    if (!s.ok()) return s;
  }
  if (options.shards.empty()) {
    return absl::InvalidArgumentError("Strata op: attr 'shards' is empty");
  }
  return options;
}

std::string ConnectionOptions::Key() const {
  // '\n' never occurs in an address or a path a user means.
  return std::string(serving ? "serving\n" : "training\n") + shards + "\n" +
         std::to_string(rpc_timeout_s) + "\n" +
         std::to_string(retry_deadline_s) + "\n" + tls_ca_file + "\n" +
         tls_client_cert_file + "\n" + tls_client_key_file + "\n" +
         auth_token_file + (wire_float16 ? "\nfloat16" : "\nfloat32");
}

absl::StatusOr<PsConnection*> PsConnection::Acquire(
    tensorflow::OpKernelConstruction* context,
    const ConnectionOptions& options) {
  absl::StatusOr<const ClientLibrary*> library = ClientLibrary::Get();
  if (!library.ok()) return library.status();
  if (context->resource_manager() == nullptr) {
    return absl::FailedPreconditionError(
        "Strata ops need a device with a resource manager");
  }
  PsConnection* connection = nullptr;
  absl::Status status =
      context->resource_manager()->LookupOrCreate<PsConnection>(
          "strata", options.Key(), &connection,
          [&](PsConnection** made) -> absl::Status {
            StrataTfClientOptions c = {};
            c.shards = options.shards.c_str();
            c.rpc_timeout_s = options.rpc_timeout_s;
            c.retry_deadline_s = options.retry_deadline_s;
            c.tls_ca_file = options.tls_ca_file.c_str();
            c.tls_client_cert_file = options.tls_client_cert_file.c_str();
            c.tls_client_key_file = options.tls_client_key_file.c_str();
            c.auth_token_file = options.auth_token_file.c_str();
            c.wire_float16 = options.wire_float16 ? 1 : 0;
            StrataTfClient* client = nullptr;
            const int code =
                options.serving ? (*library)->serving_client_create(&c, &client)
                                : (*library)->client_create(&c, &client);
            if (code != 0) {
              return (*library)->ToStatus(
                  code,
                  std::string(options.serving ? "Strata serving client for "
                                              : "Strata client for shards ") +
                      options.shards);
            }
            *made = new PsConnection(*library, client, options.shards);
            return absl::OkStatus();
          });
  if (!status.ok()) return status;
  return connection;
}

PsConnection::~PsConnection() { library_->client_destroy(client_); }

std::string PsConnection::DebugString() const {
  return "Strata PS connection to " + shards_;
}

absl::Status PsConnection::CreateTable(const StrataTfTableConfig& config) {
  return library_->ToStatus(
      library_->create_table(client_, &config),
      "Strata create table '" + std::string(config.name) + "'");
}

absl::Status PsConnection::Pull(const std::string& table, const uint64_t* keys,
                                size_t num_keys, size_t dim, float* out) {
  return library_->ToStatus(
      library_->pull(client_, table.c_str(), keys, num_keys, dim, out),
      "Strata pull from table '" + table + "'");
}

absl::Status PsConnection::ServingLookup(const std::string& table,
                                         const uint64_t* keys, size_t num_keys,
                                         size_t dim, float* out) {
  return library_->ToStatus(library_->serving_lookup(client_, table.c_str(),
                                                     keys, num_keys, dim, out),
                            "Strata serving lookup in table '" + table + "'");
}

absl::Status PsConnection::Push(const std::string& table, const uint64_t* keys,
                                size_t num_keys, size_t dim,
                                const float* gradients) {
  return library_->ToStatus(
      library_->push(client_, table.c_str(), keys, num_keys, dim, gradients),
      "Strata push to table '" + table + "'");
}

absl::Status PsConnection::PushAsync(const std::string& table,
                                     const uint64_t* keys, size_t num_keys,
                                     size_t dim, const float* gradients,
                                     int max_pending) {
  return library_->ToStatus(
      library_->push_async(client_, table.c_str(), keys, num_keys, dim,
                           gradients, max_pending),
      "Strata background push to table '" + table + "'");
}

absl::Status PsConnection::WaitForPushes() {
  return library_->ToStatus(library_->wait_for_pushes(client_),
                            "Strata background push");
}

}  // namespace strata
