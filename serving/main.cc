// strata-serving: the serving parameter server. Follows every training
// shard's change stream (or loads a checkpoint) into its own store and
// answers read-only lookups.

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cluster_flags.h"
#include "common/command_line.h"
#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/rate_history.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "serving/checkpoint_loader.h"
#include "serving/follower_set.h"
#include "serving/serving_service.h"
#include "serving/serving_store.h"
#include "serving/shard_follower.h"

ABSL_FLAG(int, port, 50061, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, shards, "",
          "host:port of every training shard, in shard-index order: follow "
          "their change streams. Exclusive with --checkpoint_dirs.");
ABSL_FLAG(double, shard_map_check_s, 2,
          "Seconds between reads of the training shards' shard map: when "
          "stratactl reshard grows or shrinks the cluster, the shards the map "
          "adds are followed and those it removes are left once caught up. "
          "0 never reads it.");
ABSL_FLAG(std::string, checkpoint_dirs, "",
          "Offline mode: one checkpoint directory per training shard, in "
          "shard-index order (<training data_dir>/checkpoints/<id>), loaded "
          "once at start. Exclusive with --shards.");
ABSL_FLAG(std::string, tables, "",
          "Comma-separated tables to serve; empty serves every table.");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of the serving store (required). A restart on the same "
          "directory resumes each shard's stream where it stopped.");
ABSL_FLAG(int64_t, write_buffer_mb, 64,
          "RocksDB memtable size in MiB; each column family may hold two, "
          "which counts against memory next to --cache_rows.");
ABSL_FLAG(int64_t, cache_rows, 1 << 20,
          "Rows kept in memory in front of the store; 0 disables the cache.");
ABSL_FLAG(std::string, unknown_keys, "zeros",
          "What a lookup returns for a key without a row: 'zeros', or "
          "'initializer' (the table's initial value, as training would).");
ABSL_FLAG(int64_t, max_keys_per_request, 262144,
          "Largest number of keys one Lookup may carry.");
ABSL_FLAG(int, request_thread_nice, 10,
          "Nice increment (0-19) of the --request_threads, which receive, "
          "serve and answer every call: on a loaded core gRPC's remaining "
          "threads (its executor and timers, and the followers' streams) "
          "preempt them, rather than wait their turn behind a lookup. Nice "
          "ranks them below every other thread of the machine (or "
          "container) too. 0: the process's priority.");
ABSL_FLAG(bool, auth_reads, false,
          "Lookup and Status need the --auth_token_file token too; by "
          "default reads are open.");
ABSL_FLAG(std::string, shard_tls_ca_file, "",
          "Follow the training shards over TLS, verifying them against this "
          "PEM CA.");
ABSL_FLAG(std::string, shard_tls_client_cert_file, "",
          "PEM client certificate presented to the training shards.");
ABSL_FLAG(std::string, shard_tls_client_key_file, "",
          "PEM private key of --shard_tls_client_cert_file.");
ABSL_FLAG(std::string, shard_auth_token_file, "",
          "File holding the training shards' bearer token (Subscribe needs "
          "it when they have one).");

namespace strata {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr char kComponent[] = "serving";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-serving: %s (see --help)\n", message.c_str());
  return kUsageExitCode;
}

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipWhitespace());
}

// The flags, checked.
struct Config {
  std::vector<std::string> shards;
  std::vector<std::string> checkpoint_dirs;
  std::vector<std::string> tables;
  ServingStoreOptions store;
  int port = 0;
};

absl::StatusOr<Config> ReadFlags() {
  Config config;
  LogLevel level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level).c_str(), &level)) {
    return absl::InvalidArgumentError(
        "--log_level must be debug, info, warning or error");
  }
  SetMinLogLevel(level);
  config.shards = SplitList(absl::GetFlag(FLAGS_shards));
  config.checkpoint_dirs = SplitList(absl::GetFlag(FLAGS_checkpoint_dirs));
  config.tables = SplitList(absl::GetFlag(FLAGS_tables));
  if (config.shards.empty() == config.checkpoint_dirs.empty()) {
    return absl::InvalidArgumentError(
        "give either --shards (follow training) or --checkpoint_dirs "
        "(offline)");
  }
  config.store.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (config.store.data_dir.empty()) {
    return absl::InvalidArgumentError("--data_dir is required");
  }
  if (absl::GetFlag(FLAGS_write_buffer_mb) < 1) {
    return absl::InvalidArgumentError("--write_buffer_mb must be >= 1");
  }
  config.store.write_buffer_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_write_buffer_mb)) << 20;
  if (absl::GetFlag(FLAGS_cache_rows) < 0) {
    return absl::InvalidArgumentError("--cache_rows must be >= 0");
  }
  config.store.cache_rows =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_cache_rows));
  absl::StatusOr<UnknownKeyPolicy> unknown =
      ParseUnknownKeyPolicy(absl::GetFlag(FLAGS_unknown_keys));
  if (!unknown.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unknown_keys: ", unknown.status().message()));
  }
  config.store.unknown_keys = *unknown;
  const double map_check_s = absl::GetFlag(FLAGS_shard_map_check_s);
  if (!(map_check_s >= 0 && map_check_s <= 3600)) {
    return absl::InvalidArgumentError(
        "--shard_map_check_s must be in [0, 3600] (0 never reads the shard "
        "map)");
  }
  if (absl::GetFlag(FLAGS_request_threads) < 0) {
    return absl::InvalidArgumentError("--request_threads must be >= 0");
  }
  if (const int nice = absl::GetFlag(FLAGS_request_thread_nice);
      nice < 0 || nice > 19) {
    return absl::InvalidArgumentError(
        "--request_thread_nice must be in [0, 19]");
  }
  if (absl::GetFlag(FLAGS_max_queued_requests) < 1) {
    return absl::InvalidArgumentError("--max_queued_requests must be >= 1");
  }
  if (!(absl::GetFlag(FLAGS_max_queue_wait_ms) >= 0)) {
    return absl::InvalidArgumentError("--max_queue_wait_ms must be >= 0");
  }
  if (absl::GetFlag(FLAGS_max_keys_per_request) < 1) {
    return absl::InvalidArgumentError("--max_keys_per_request must be >= 1");
  }
  config.port = absl::GetFlag(FLAGS_port);
  if (config.port < 0 || config.port > 65535) {
    return absl::InvalidArgumentError("--port is outside 0..65535");
  }
  return config;
}

// Offline mode: copies each checkpoint into the store, as shard i's rows.
absl::StatusOr<std::vector<FollowState>> LoadCheckpoints(const Config& config,
                                                         ServingStore& store) {
  std::vector<FollowState> states;
  for (size_t i = 0; i < config.checkpoint_dirs.size(); ++i) {
    const std::string& dir = config.checkpoint_dirs[i];
    absl::StatusOr<CheckpointLoadResult> loaded =
        LoadCheckpoint(dir, static_cast<uint32_t>(i), config.tables, store);
    if (!loaded.ok()) return loaded.status();
    STRATA_LOG(INFO, kComponent)
        << "loaded checkpoint " << dir << " as shard " << i << ": "
        << loaded->tables << " tables, " << loaded->rows << " rows";
    FollowState state;
    state.shard_index = static_cast<uint32_t>(i);
    state.address = dir;
    states.push_back(state);
  }
  return states;
}

// The daemon's own port and its channels to the training shards.
struct Security {
  DaemonSecurity daemon;
  std::shared_ptr<grpc::ChannelCredentials> shard_credentials;
  std::string shard_auth_token;
};

absl::StatusOr<Security> LoadSecurity() {
  Security security;
  absl::StatusOr<DaemonSecurity> daemon = LoadDaemonSecurity(
      absl::GetFlag(FLAGS_tls_cert_file), absl::GetFlag(FLAGS_tls_key_file),
      absl::GetFlag(FLAGS_tls_client_ca_file),
      absl::GetFlag(FLAGS_auth_token_file));
  if (!daemon.ok()) return daemon.status();
  security.daemon = *std::move(daemon);
  if (absl::GetFlag(FLAGS_auth_reads) && security.daemon.auth_token.empty()) {
    return absl::InvalidArgumentError("--auth_reads needs --auth_token_file");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFromFiles(
          absl::GetFlag(FLAGS_shard_tls_ca_file),
          absl::GetFlag(FLAGS_shard_tls_client_cert_file),
          absl::GetFlag(FLAGS_shard_tls_client_key_file));
  if (!credentials.ok()) {
    return absl::Status(
        credentials.status().code(),
        absl::StrCat("--shard_", credentials.status().message()));
  }
  security.shard_credentials = *std::move(credentials);
  if (!absl::GetFlag(FLAGS_shard_auth_token_file).empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(
        "--shard_auth_token_file", absl::GetFlag(FLAGS_shard_auth_token_file));
    if (!token.ok()) return token.status();
    security.shard_auth_token = *std::move(token);
  }
  return security;
}

int Run() {
  absl::StatusOr<Config> config = ReadFlags();
  if (!config.ok()) return UsageError(std::string(config.status().message()));
  absl::StatusOr<Security> security = LoadSecurity();
  if (!security.ok()) {
    STRATA_LOG(ERROR, kComponent) << security.status().message();
    return kExitRuntimeError;
  }
  WarnIfUnprotected(kComponent, absl::GetFlag(FLAGS_host), security->daemon);

  // Block the stop signals in every thread; the main thread waits for them.
  const sigset_t stop_signals = BlockStopSignals();

  absl::StatusOr<std::unique_ptr<ServingStore>> store =
      ServingStore::Open(config->store);
  if (!store.ok()) {
    STRATA_LOG(ERROR, kComponent)
        << "cannot open --data_dir " << config->store.data_dir << ": "
        << store.status();
    return kExitRuntimeError;
  }

  std::unique_ptr<FollowerSet> followers;
  std::vector<FollowState> offline_states;
  const bool offline = !config->checkpoint_dirs.empty();
  if (offline) {
    absl::StatusOr<std::vector<FollowState>> loaded =
        LoadCheckpoints(*config, **store);
    if (!loaded.ok()) {
      STRATA_LOG(ERROR, kComponent) << loaded.status();
      return kExitRuntimeError;
    }
    offline_states = *std::move(loaded);
  } else {
    FollowerSetOptions options;
    options.follower.tables = config->tables;
    options.follower.store = store->get();
    options.follower.credentials = security->shard_credentials;
    options.follower.auth_token = security->shard_auth_token;
    options.map_check_interval =
        absl::Seconds(absl::GetFlag(FLAGS_shard_map_check_s));
    followers = std::make_unique<FollowerSet>(options, config->shards);
  }

  ServingServiceOptions service_options;
  service_options.store = store->get();
  service_options.mode = offline ? "offline" : "follow";
  service_options.max_keys_per_request =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_keys_per_request));
  service_options.request_threads = absl::GetFlag(FLAGS_request_threads);
  service_options.request_thread_nice =
      absl::GetFlag(FLAGS_request_thread_nice);
  service_options.max_queued_requests =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_queued_requests));
  service_options.max_queue_wait =
      absl::Milliseconds(absl::GetFlag(FLAGS_max_queue_wait_ms));
  service_options.auth_token = security->daemon.auth_token;
  service_options.auth_reads = absl::GetFlag(FLAGS_auth_reads);
  service_options.shards = [&followers, &offline_states] {
    return followers == nullptr ? offline_states : followers->states();
  };
  ServingService service(service_options);

  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> started = StartGrpcServer(
      absl::GetFlag(FLAGS_host), config->port, {&service}, &bound_port,
      security->daemon.credentials, [&service](grpc::ServerBuilder& builder) {
        service.ConfigureServer(builder);
      });
  if (!started.ok()) {
    STRATA_LOG(ERROR, kComponent) << started.status().message();
    return kExitRuntimeError;
  }
  std::unique_ptr<grpc::Server> server = *std::move(started);
  service.StartRequestThreads();
  if (followers != nullptr) followers->Start();

  // The status page's charts: a sample of the traffic every second.
  std::optional<PeriodicTask> sampler;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    sampler.emplace(absl::Seconds(1),
                    [&service] { service.SampleTraffic(absl::Now()); });
  }
  HttpServer http;
  int metrics_port = -1;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    http.Handle("/healthz", [] {
      return HttpServer::Response{200, "text/plain", "ok\n"};
    });
    http.Handle("/metrics", [&service] {
      MetricFamilies families;
      AddBuildInfo(&families, "strata-serving");
      AddProcessMetrics(&families);
      service.AddMetrics(&families);
      return HttpServer::Response{200, kMetricsContentType,
                                  MetricsText(families)};
    });
    // A page for people: the same numbers, reloading itself.
    http.Handle("/status", [&service] {
      return HttpServer::Response{200, "text/html; charset=utf-8",
                                  service.StatusPage(/*refresh_seconds=*/2)};
    });
    absl::StatusOr<int> http_port = http.Start(
        absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_metrics_port));
    if (!http_port.ok()) {
      STRATA_LOG(ERROR, kComponent) << http_port.status().message();
      server->Shutdown();
      return kExitRuntimeError;
    }
    metrics_port = *http_port;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    absl::Status written =
        WritePortFile(absl::GetFlag(FLAGS_port_file), bound_port);
    if (!written.ok()) {
      STRATA_LOG(ERROR, kComponent) << written.message();
      server->Shutdown();
      return kExitRuntimeError;
    }
  }
  STRATA_LOG(INFO, kComponent)
      << "serving on " << absl::GetFlag(FLAGS_host) << ":" << bound_port
      << " mode=" << service_options.mode << " metrics_port=" << metrics_port
      << " data_dir=" << config->store.data_dir
      << " tls=" << (security->daemon.tls ? "on" : "off")
      << " auth=" << (security->daemon.auth_token.empty() ? "off" : "on")
      << " auth_reads=" << (service_options.auth_reads ? "on" : "off") << " "
      << (offline ? "checkpoint_dirs=" : "shards=")
      << absl::StrJoin(offline ? config->checkpoint_dirs : config->shards, ",");

  const int signal_number = WaitForStopSignal(stop_signals);
  STRATA_LOG(INFO, kComponent)
      << "received signal " << signal_number << ", draining";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (followers != nullptr) followers->Stop();
  http.Stop();
  sampler.reset();  // It reads the followers' states.
  followers.reset();
  store->reset();
  STRATA_LOG(INFO, kComponent) << "stopped cleanly";
  return kExitOk;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  // gRPC's default poller on Linux (epoll1) shares one epoll set between
  // every thread waiting on any completion queue, so the followers' threads,
  // blocked on their streams, received lookups too and handed each to a
  // request thread: a context switch and a wake-up per lookup, 30% of the
  // CPU and a third of the capacity (bench/RESULTS.md). With "poll" a thread
  // polls only its own queue's sockets. An explicit setting is kept.
  setenv("GRPC_POLL_STRATEGY", "poll", /*overwrite=*/0);
  strata::ParseCommandLineWithCluster(
      "The Strata serving parameter server: follows the training shards' "
      "change streams and answers read-only lookups.\n"
      "Example: strata-serving --port=50061 --data_dir=/var/lib/strata/serving "
      "--shards=10.0.0.1:50051,10.0.0.2:50051\n"
      "  or: strata-serving --cluster_file=cluster.yaml",
      argc, argv, strata::ClusterRole::kServing);
  return strata::Run();
}
