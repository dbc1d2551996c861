#include "coordination/etcd_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace strata {
namespace {

namespace pb = ::etcdserverpb;

// The end of the key range that holds every key starting with `prefix`
// (etcd's range_end convention: the prefix with its last byte incremented).
std::string PrefixRangeEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// A transaction's condition: `key` was created at `revision`.
void AddCreateRevisionIs(absl::string_view key, int64_t revision,
                         pb::TxnRequest& request) {
  pb::Compare* compare = request.add_compare();
  compare->set_key(std::string(key));
  compare->set_target(pb::Compare::CREATE);
  compare->set_result(pb::Compare::EQUAL);
  compare->set_create_revision(revision);
}

EtcdKeyValue FromProto(const mvccpb::KeyValue& kv) {
  EtcdKeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.lease = kv.lease();
  return out;
}

// The channel and stubs of one connection attempt.
struct EtcdConnection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
};

class GrpcEtcdClient final : public EtcdClient {
 public:
  explicit GrpcEtcdClient(const EtcdClientOptions& options)
      : options_(options), connection_(Connect()) {}

  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) override {
    pb::LeaseGrantRequest request;
    request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
    pb::LeaseGrantResponse response;
    STRATA_RETURN_IF_ERROR(Unary(
        "lease grant", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.lease->LeaseGrant(&context, request, &response);
        }));
    if (!response.error().empty()) {
      return absl::UnavailableError(
          absl::StrCat("etcd refused a lease: ", response.error()));
    }
    return response.id();
  }

  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease) override {
    const std::shared_ptr<EtcdConnection> c = connection();
    grpc::ClientContext context;
    SetDeadline(context);
    auto stream = c->lease->LeaseKeepAlive(&context);
    pb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    pb::LeaseKeepAliveResponse response;
    const bool exchanged = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    if (!exchanged) {
      return Failed(status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                               "stream closed")
                                : status,
                    c, "lease keep-alive");
    }
    if (response.ttl() <= 0) {
      return absl::NotFoundError(
          absl::StrCat("etcd lease ", lease, " has expired"));
    }
    return absl::Seconds(response.ttl());
  }

  absl::Status RevokeLease(int64_t lease) override {
    pb::LeaseRevokeRequest request;
    request.set_id(lease);
    pb::LeaseRevokeResponse response;
    STRATA_RETURN_IF_ERROR(Unary(
        "lease revoke", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.lease->LeaseRevoke(&context, request, &response);
        }));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease) override {
    pb::PutRequest request;
    request.set_key(std::string(key));
    request.set_value(std::string(value));
    request.set_lease(lease);
    pb::PutResponse response;
    STRATA_RETURN_IF_ERROR(
        Unary("put", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.kv->Put(&context, request, &response);
        }));
    return response.header().revision();
  }

  absl::StatusOr<std::optional<int64_t>> CreateIfAbsent(
      absl::string_view key, absl::string_view value, int64_t lease) override {
    pb::TxnRequest request;
    // Create revision 0: the key does not exist.
    AddCreateRevisionIs(key, 0, request);
    pb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(std::string(key));
    put->set_value(std::string(value));
    put->set_lease(lease);
    pb::TxnResponse response;
    STRATA_RETURN_IF_ERROR(Unary(
        "transaction", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.kv->Txn(&context, request, &response);
        }));
    if (!response.succeeded()) return std::optional<int64_t>();
    return std::optional<int64_t>(response.header().revision());
  }

  absl::StatusOr<bool> PutIfModifiedAt(absl::string_view key,
                                       absl::string_view value,
                                       int64_t mod_revision) override {
    pb::TxnRequest request;
    pb::Compare* compare = request.add_compare();
    compare->set_key(std::string(key));
    compare->set_target(pb::Compare::MOD);
    compare->set_result(pb::Compare::EQUAL);
    compare->set_mod_revision(mod_revision);
    pb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(std::string(key));
    put->set_value(std::string(value));
    pb::TxnResponse response;
    STRATA_RETURN_IF_ERROR(Unary(
        "transaction", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.kv->Txn(&context, request, &response);
        }));
    return response.succeeded();
  }

  absl::StatusOr<std::optional<EtcdKeyValue>> Get(
      absl::string_view key) override {
    STRATA_ASSIGN_OR_RETURN(pb::RangeResponse response, Range(key, ""));
    if (response.kvs_size() == 0) return std::optional<EtcdKeyValue>();
    return std::optional<EtcdKeyValue>(FromProto(response.kvs(0)));
  }

  absl::StatusOr<std::vector<EtcdKeyValue>> GetPrefix(
      absl::string_view prefix) override {
    STRATA_ASSIGN_OR_RETURN(pb::RangeResponse response,
                            Range(prefix, PrefixRangeEnd(prefix)));
    std::vector<EtcdKeyValue> out;
    out.reserve(response.kvs_size());
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      out.push_back(FromProto(kv));
    }
    return out;
  }

  absl::StatusOr<bool> DeleteIfCreatedAt(absl::string_view key,
                                         int64_t create_revision) override {
    pb::TxnRequest request;
    AddCreateRevisionIs(key, create_revision, request);
    request.add_success()->mutable_request_delete_range()->set_key(
        std::string(key));
    pb::TxnResponse response;
    STRATA_RETURN_IF_ERROR(Unary(
        "transaction", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.kv->Txn(&context, request, &response);
        }));
    return response.succeeded();
  }

 private:
  void SetDeadline(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(
                             absl::ToInt64Milliseconds(options_.call_timeout)));
  }

  // Runs call(connection, context) on the current connection with the
  // call deadline; a failure names etcd and `what`.
  template <typename Call>
  absl::Status Unary(const char* what, const Call& call) {
    const std::shared_ptr<EtcdConnection> used = connection();
    grpc::ClientContext context;
    SetDeadline(context);
    const grpc::Status status = call(*used, context);
    return status.ok() ? absl::OkStatus() : Failed(status, used, what);
  }

  std::shared_ptr<grpc::Channel> NewChannel() const {
    grpc::ChannelArguments args;
    // Reconnect within a lease's TTL, not after gRPC's default of up to
    // 120 s.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // One channel over every endpoint: pick_first moves to the next address
    // when the current one fails.
    return grpc::CreateCustomChannel(
        absl::StrCat("ipv4:", absl::StrJoin(options_.endpoints, ",")),
        grpc::InsecureChannelCredentials(), args);
  }

  std::shared_ptr<EtcdConnection> Connect() const {
    auto connection = std::make_shared<EtcdConnection>();
    connection->channel = NewChannel();
    connection->kv = pb::KV::NewStub(connection->channel);
    connection->lease = pb::Lease::NewStub(connection->channel);
    return connection;
  }

  std::shared_ptr<EtcdConnection> connection() {
    absl::MutexLock lock(&mu_);
    return connection_;
  }

  // A channel whose first attempts met a port nobody listened on yet (etcd
  // starting) can stay failing after etcd is up (seen with gRPC 1.51): an
  // UNAVAILABLE answer replaces it with a new one.
  absl::Status Failed(const grpc::Status& status,
                      const std::shared_ptr<EtcdConnection>& used,
                      const char* what) {
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      absl::MutexLock lock(&mu_);
      if (connection_ == used) connection_ = Connect();
    }
    absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(),
                        absl::StrCat("etcd ", what, " at ",
                                     absl::StrJoin(options_.endpoints, ","),
                                     " failed: ", s.message()));
  }

  absl::StatusOr<pb::RangeResponse> Range(absl::string_view key,
                                          const std::string& range_end) {
    pb::RangeRequest request;
    request.set_key(std::string(key));
    if (!range_end.empty()) request.set_range_end(range_end);
    pb::RangeResponse response;
    STRATA_RETURN_IF_ERROR(
        Unary("range", [&](EtcdConnection& c, grpc::ClientContext& context) {
          return c.kv->Range(&context, request, &response);
        }));
    return response;
  }

  const EtcdClientOptions options_;
  absl::Mutex mu_;
  std::shared_ptr<EtcdConnection> connection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    const EtcdClientOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoint given");
  }
  for (const std::string& endpoint : options.endpoints) {
    if (endpoint.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", endpoint, "' is not host:port"));
    }
  }
  return std::unique_ptr<EtcdClient>(new GrpcEtcdClient(options));
}

}  // namespace strata
