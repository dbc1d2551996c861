#include "tensorflow/strata_tf_client.h"

#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "client/serving_client.h"
#include "common/tls.h"
#include "proto/strata.pb.h"
#include "worker/async_pusher.h"

namespace strata {
namespace {

// The background pushes of one client: an AsyncPusher per table, made on
// the first strata_tf_push_async of it. A pusher whose push failed is
// dropped once its error has been returned, so that the next push of that
// table starts afresh (an AsyncPusher's error is sticky).
class BackgroundPushes {
 public:
  explicit BackgroundPushes(PsClient* client) : client_(client) {}
  ~BackgroundPushes() { (void)WaitForAll(); }  // each pusher drains too

  absl::Status Push(const char* table, std::vector<uint64_t> keys,
                    std::vector<float> gradients, int max_pending) {
    std::shared_ptr<AsyncPusher> pusher = PusherOf(table, max_pending);
    absl::Status status = pusher->Push(std::move(keys), std::move(gradients));
    if (!status.ok()) Forget(table, pusher);
    return status;
  }

  absl::Status WaitForAll() {
    std::vector<std::pair<std::string, std::shared_ptr<AsyncPusher>>> all;
    {
      absl::MutexLock lock(&mu_);
      all.assign(pushers_.begin(), pushers_.end());
    }
    absl::Status first_error;
    for (auto& [table, pusher] : all) {
      absl::Status status = pusher->Drain();
      if (status.ok()) continue;
      Forget(table, pusher);
      first_error.Update(status);
    }
    return first_error;
  }

 private:
  std::shared_ptr<AsyncPusher> PusherOf(const std::string& table,
                                        int max_pending) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<AsyncPusher>& pusher = pushers_[table];
    if (pusher == nullptr) {
      // A layer's keys may repeat within a batch: the client sums them.
      pusher = std::make_shared<AsyncPusher>(client_, table, max_pending,
                                             /*distinct_keys=*/false);
    }
    return pusher;
  }

  void Forget(const std::string& table,
              const std::shared_ptr<AsyncPusher>& pusher) {
    absl::MutexLock lock(&mu_);
    auto it = pushers_.find(table);
    if (it != pushers_.end() && it->second == pusher) pushers_.erase(it);
  }

  PsClient* const client_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<AsyncPusher>> pushers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace strata

// The C handle is the C++ client of the training PS or of the serving PS
// (exactly one is set); only this file sees its definition. `pushes` is
// destroyed first, so its pushers drain while the client is there.
struct StrataTfClient {
  std::unique_ptr<strata::PsClient> client;
  std::unique_ptr<strata::ServingClient> serving;
  std::unique_ptr<strata::BackgroundPushes> pushes;
};

namespace strata {
namespace {

// Every client with background pushes, so that exit() finishes their queued
// pushes: the TensorFlow resource that owns a client may never be destroyed
// before the process ends. The atexit handler is registered after gRPC's
// start-up, so it runs before gRPC's own exit handlers.
absl::Mutex live_clients_mu(absl::kConstInit);
absl::flat_hash_set<StrataTfClient*>& LiveClients()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_clients_mu) {
  static auto* clients = new absl::flat_hash_set<StrataTfClient*>();
  return *clients;
}

void FinishPushesAtExit() {
  absl::MutexLock lock(&live_clients_mu);
  for (StrataTfClient* client : LiveClients()) {
    (void)client->pushes->WaitForAll();
  }
}

BackgroundPushes& PushesOf(StrataTfClient& client) {
  absl::MutexLock lock(&live_clients_mu);
  if (client.pushes == nullptr) {
    static const bool registered = (std::atexit(FinishPushesAtExit), true);
    (void)registered;
    client.pushes = std::make_unique<BackgroundPushes>(client.client.get());
    LiveClients().insert(&client);
  }
  return *client.pushes;
}

// The client's background pushes, or null when it never pushed in the
// background.
BackgroundPushes* ExistingPushesOf(StrataTfClient& client) {
  absl::MutexLock lock(&live_clients_mu);
  return client.pushes.get();
}

void ForgetClient(StrataTfClient* client) {
  absl::MutexLock lock(&live_clients_mu);
  LiveClients().erase(client);
}

// What strata_tf_last_error_*() report: per thread, so that concurrent
// callers (TensorFlow runs kernels on many threads) never see each other's.
struct LastError {
  int code = 0;
  std::string message;
};

LastError& ThreadLastError() {
  thread_local LastError last_error;
  return last_error;
}

int Report(const absl::Status& status) {
  LastError& last = ThreadLastError();
  last.code = static_cast<int>(status.code());
  last.message = std::string(status.message());
  return last.code;
}

// Runs `call` and reports its status. Nothing may unwind through the C ABI
// into a caller built with another C++ runtime, so an exception (only
// std::bad_alloc is expected: our code does not throw) becomes a status.
template <typename Call>
int Guarded(Call&& call) {
  try {
    return Report(call());
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("strata: out of memory"));
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat("strata: ", e.what())));
  } catch (...) {
    return Report(absl::InternalError("strata: unknown exception"));
  }
}

bool IsSet(const char* text) { return text != nullptr && text[0] != '\0'; }

absl::StatusOr<PsClientOptions> ToPsClientOptions(
    const StrataTfClientOptions& options) {
  if (!IsSet(options.shards)) {
    return absl::InvalidArgumentError("no shard addresses given");
  }
  PsClientOptions out;
  for (absl::string_view address : absl::StrSplit(options.shards, ',')) {
    address = absl::StripAsciiWhitespace(address);
    if (address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty shard address in \"", options.shards, "\""));
    }
    out.shard_addresses.emplace_back(address);
  }
  if (options.rpc_timeout_s > 0) {
    out.rpc_timeout = absl::Seconds(options.rpc_timeout_s);
  }
  if (options.retry_deadline_s >= 0) {
    out.retry_deadline = absl::Seconds(options.retry_deadline_s);
  }
  if (options.wire_float16 != 0) out.encoding = WireEncoding::kFloat16;
  if (IsSet(options.tls_ca_file)) out.tls_ca_file = options.tls_ca_file;
  if (IsSet(options.tls_client_cert_file)) {
    out.tls_client_cert_file = options.tls_client_cert_file;
  }
  if (IsSet(options.tls_client_key_file)) {
    out.tls_client_key_file = options.tls_client_key_file;
  }
  if (IsSet(options.auth_token_file)) {
    absl::StatusOr<std::string> token =
        ReadTokenFile("auth_token_file", options.auth_token_file);
    if (!token.ok()) return token.status();
    out.auth_token = *std::move(token);
  }
  return out;
}

absl::StatusOr<v1::TableConfig> ToTableConfig(
    const StrataTfTableConfig& config) {
  if (!IsSet(config.name)) {
    return absl::InvalidArgumentError("table name is empty");
  }
  if (config.optimizer < 0 || config.optimizer > STRATA_TF_OPTIMIZER_FTRL) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer type ", config.optimizer));
  }
  if (config.initializer < 0 ||
      config.initializer > STRATA_TF_INITIALIZER_TRUNCATED_NORMAL) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown initializer type ", config.initializer));
  }
  v1::TableConfig proto;
  proto.set_name(config.name);
  proto.set_dim(config.dim);
  proto.set_seed(config.seed);
  v1::OptimizerConfig* optimizer = proto.mutable_optimizer();
  optimizer->set_type(static_cast<v1::OptimizerType>(config.optimizer));
  optimizer->set_learning_rate(config.learning_rate);
  optimizer->set_initial_accumulator(config.initial_accumulator);
  optimizer->set_epsilon(config.epsilon);
  optimizer->set_beta1(config.beta1);
  optimizer->set_beta2(config.beta2);
  optimizer->set_ftrl_beta(config.ftrl_beta);
  optimizer->set_l1(config.l1);
  optimizer->set_l2(config.l2);
  v1::InitializerConfig* initializer = proto.mutable_initializer();
  initializer->set_type(static_cast<v1::InitializerType>(config.initializer));
  initializer->set_value(config.init_value);
  initializer->set_min(config.init_min);
  initializer->set_max(config.init_max);
  initializer->set_mean(config.init_mean);
  initializer->set_stddev(config.init_stddev);
  return proto;
}

// The checks shared by pull, push and lookup; `what` names the call in
// messages. `of_serving`: the call needs a serving PS client.
absl::Status CheckBatch(const StrataTfClient* client, const char* table,
                        const void* keys, size_t num_keys, size_t dim,
                        const void* values, const char* what,
                        bool of_serving = false) {
  if (client == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null client"));
  }
  if ((of_serving ? client->serving == nullptr : client->client == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a client of the ", of_serving ? "training" : "serving",
        " PS cannot do this"));
  }
  if (!IsSet(table)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty table"));
  }
  if (dim == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dim is 0"));
  }
  if (num_keys > 0 && (keys == nullptr || values == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null keys or values"));
  }
  return absl::OkStatus();
}

// The serving PS takes the same connection options as the training PS.
ServingClientOptions ToServingClientOptions(const PsClientOptions& options) {
  ServingClientOptions out;
  out.endpoints = options.shard_addresses;
  out.rpc_timeout = options.rpc_timeout;
  out.retry_deadline = options.retry_deadline;
  out.tls_ca_file = options.tls_ca_file;
  out.tls_client_cert_file = options.tls_client_cert_file;
  out.tls_client_key_file = options.tls_client_key_file;
  out.auth_token = options.auth_token;
  return out;
}

// What both create functions do around `make(options, handle)`, which sets
// the handle's one client: check the arguments, parse the options, and hand
// the handle over only when the client was made.
template <typename Make>
int CreateHandle(const StrataTfClientOptions* options, StrataTfClient** client,
                 const Make& make) {
  return Guarded([&]() -> absl::Status {
    if (options == nullptr || client == nullptr) {
      return absl::InvalidArgumentError("null options or client");
    }
    absl::StatusOr<PsClientOptions> parsed = ToPsClientOptions(*options);
    if (!parsed.ok()) return parsed.status();
    auto handle = std::make_unique<StrataTfClient>();
    if (absl::Status made = make(*parsed, *handle); !made.ok()) return made;
    *client = handle.release();
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace strata

// The library is built with -fvisibility=hidden and a version script; these
// are the only symbols it exports.
#define STRATA_TF_EXPORT __attribute__((visibility("default")))

extern "C" {

STRATA_TF_EXPORT int strata_tf_abi_version(void) {
  return STRATA_TF_CLIENT_ABI_VERSION;
}

STRATA_TF_EXPORT int strata_tf_client_create(
    const StrataTfClientOptions* options, StrataTfClient** client) {
  return strata::CreateHandle(
      options, client,
      [](const strata::PsClientOptions& parsed, StrataTfClient& handle) {
        absl::StatusOr<std::unique_ptr<strata::PsClient>> made =
            strata::PsClient::Create(parsed);
        if (!made.ok()) return made.status();
        handle.client = *std::move(made);
        return absl::OkStatus();
      });
}

STRATA_TF_EXPORT void strata_tf_client_destroy(StrataTfClient* client) {
  if (client == nullptr) return;
  strata::ForgetClient(client);
  client->pushes.reset();  // finishes the queued pushes
  delete client;
}

STRATA_TF_EXPORT int strata_tf_create_table(StrataTfClient* client,
                                            const StrataTfTableConfig* config) {
  return strata::Guarded([&]() -> absl::Status {
    if (client == nullptr || config == nullptr) {
      return absl::InvalidArgumentError("create table: null client or config");
    }
    absl::StatusOr<strata::v1::TableConfig> proto =
        strata::ToTableConfig(*config);
    if (!proto.ok()) return proto.status();
    return client->client->CreateTable(*proto);
  });
}

STRATA_TF_EXPORT int strata_tf_pull(StrataTfClient* client, const char* table,
                                    const uint64_t* keys, size_t num_keys,
                                    size_t dim, float* out) {
  return strata::Guarded([&]() -> absl::Status {
    absl::Status valid =
        strata::CheckBatch(client, table, keys, num_keys, dim, out, "pull");
    if (!valid.ok() || num_keys == 0) return valid;
    return client->client->Pull(table, absl::MakeConstSpan(keys, num_keys),
                                absl::MakeSpan(out, num_keys * dim));
  });
}

STRATA_TF_EXPORT int strata_tf_push(StrataTfClient* client, const char* table,
                                    const uint64_t* keys, size_t num_keys,
                                    size_t dim, const float* gradients) {
  return strata::Guarded([&]() -> absl::Status {
    absl::Status valid = strata::CheckBatch(client, table, keys, num_keys, dim,
                                            gradients, "push");
    if (!valid.ok() || num_keys == 0) return valid;
    return client->client->Push(table, absl::MakeConstSpan(keys, num_keys),
                                absl::MakeConstSpan(gradients, num_keys * dim));
  });
}

STRATA_TF_EXPORT int strata_tf_push_async(StrataTfClient* client,
                                          const char* table,
                                          const uint64_t* keys, size_t num_keys,
                                          size_t dim, const float* gradients,
                                          int max_pending) {
  return strata::Guarded([&]() -> absl::Status {
    absl::Status valid = strata::CheckBatch(client, table, keys, num_keys, dim,
                                            gradients, "push");
    if (!valid.ok()) return valid;
    if (max_pending < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: max_pending is ", max_pending, ", want >= 1"));
    }
    if (num_keys == 0) return absl::OkStatus();
    return strata::PushesOf(*client).Push(
        table, std::vector<uint64_t>(keys, keys + num_keys),
        std::vector<float>(gradients, gradients + num_keys * dim), max_pending);
  });
}

STRATA_TF_EXPORT int strata_tf_wait_for_pushes(StrataTfClient* client) {
  return strata::Guarded([&]() -> absl::Status {
    if (client == nullptr) {
      return absl::InvalidArgumentError("wait for pushes: null client");
    }
    strata::BackgroundPushes* pushes = strata::ExistingPushesOf(*client);
    return pushes == nullptr ? absl::OkStatus() : pushes->WaitForAll();
  });
}

STRATA_TF_EXPORT int strata_tf_serving_client_create(
    const StrataTfClientOptions* options, StrataTfClient** client) {
  return strata::CreateHandle(
      options, client,
      [](const strata::PsClientOptions& parsed, StrataTfClient& handle) {
        absl::StatusOr<std::unique_ptr<strata::ServingClient>> made =
            strata::ServingClient::Create(
                strata::ToServingClientOptions(parsed));
        if (!made.ok()) return made.status();
        handle.serving = *std::move(made);
        return absl::OkStatus();
      });
}

STRATA_TF_EXPORT int strata_tf_serving_lookup(StrataTfClient* client,
                                              const char* table,
                                              const uint64_t* keys,
                                              size_t num_keys, size_t dim,
                                              float* out) {
  return strata::Guarded([&]() -> absl::Status {
    absl::Status valid = strata::CheckBatch(client, table, keys, num_keys, dim,
                                            out, "lookup", true);
    if (!valid.ok() || num_keys == 0) return valid;
    return client->serving->Lookup(table, absl::MakeConstSpan(keys, num_keys),
                                   absl::MakeSpan(out, num_keys * dim));
  });
}

STRATA_TF_EXPORT int strata_tf_last_error_code(void) {
  return strata::ThreadLastError().code;
}

STRATA_TF_EXPORT const char* strata_tf_last_error_message(void) {
  return strata::ThreadLastError().message.c_str();
}

}  // extern "C"
