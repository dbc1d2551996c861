// strata-server: one shard of the training parameter server.

#include <malloc.h>
#include <signal.h>

#include <algorithm>
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
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/cluster_flags.h"
#include "common/command_line.h"
#include "common/daemon.h"
#include "common/daemon_flags.h"
#include "common/file_system.h"
#include "common/http_server.h"
#include "common/huge_page_allocator.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/rate_history.h"
#include "common/replica_lag.h"
#include "common/status_macros.h"
#include "common/system_memory.h"
#include "common/work_queue.h"
#include "coordination/etcd_client.h"
#include "embedding/embedding_store.h"
#include "grpcpp/grpcpp.h"
#include "server/rendezvous_service.h"
#include "server/replication/replica_group.h"
#include "server/replication/replication_service.h"
#include "server/shard_map_store.h"
#include "server/shard_placement.h"
#include "server/shard_service.h"
#include "server/status_page.h"
#include "server/traffic_history.h"

ABSL_FLAG(int, port, 50051, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(int, shard_index, 0, "Index of this shard, 0..num_shards-1.");
ABSL_FLAG(int, num_shards, 1, "Number of shards in the cluster.");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of this shard's RocksDB store and checkpoints (required). "
          "Created if missing; a restart on the same directory recovers every "
          "table and row.");
ABSL_FLAG(int, request_thread_nice, 0,
          "Nice increment (0-19) of the --request_threads, so that gRPC's "
          "threads, which receive Pulls and Pushes and refuse those past "
          "--max_queued_requests, run first on a loaded core. 0 (the "
          "default): the process's priority, since workers often share the "
          "shard's cores and a lower priority would slow their steps.");
ABSL_FLAG(std::string, durability, "group",
          "What an acknowledged push survives. 'sync': fsynced before the "
          "acknowledgement, survives kill -9 and power loss. 'group': its "
          "rows appended to the shard's push log (<data_dir>/push_log) "
          "before the acknowledgement, survives kill -9 of the process but "
          "not power loss; the rows reach the store's files with the flush "
          "every --flush_interval_ms. 'periodic': rows written every "
          "--flush_interval_ms, a crash loses at most that interval of pushes "
          "(never applying one twice).");
ABSL_FLAG(int, flush_interval_ms, 1000,
          "With --durability=periodic or group: how often updated rows are "
          "written (synced; under group the push log is then emptied).");
ABSL_FLAG(int64_t, push_window_ttl_s, 3600,
          "A client's push window (what makes a retried push apply once) is "
          "forgotten after this many seconds without a push from it; a retry "
          "older than that is applied again.");
ABSL_FLAG(int64_t, max_push_windows, 100000,
          "Most clients whose push windows are kept; past it the least "
          "recently used are forgotten at the next sweep.");
ABSL_FLAG(int, max_subscribers, 16,
          "Change streams (serving followers) served at once; more are "
          "refused with RESOURCE_EXHAUSTED. Each may hold a copy of the "
          "values it follows while its snapshot is sent.");
ABSL_FLAG(double, max_move_pause_s, 10,
          "A bucket move pauses pushes to its buckets for its last catch-up "
          "and the shard map change; a pause longer than this ends by itself "
          "(its driver died) and the move must begin again.");
ABSL_FLAG(int64_t, subscriber_stall_timeout_s, 60,
          "A change stream whose follower takes nothing for this many seconds "
          "is cancelled and what it holds is released.");
ABSL_FLAG(bool, auth_reads, false,
          "With --auth_token_file: Pull, ListTables and Stats need the token "
          "too (without it they stay open, so rows and table configs can be "
          "read by anyone who reaches the port). Health stays open.");
ABSL_FLAG(int64_t, max_unwritten_rows, int64_t{1} << 22,
          "With --durability=periodic or group: while flushes fail (a full or "
          "failing disk), the rows they could not write stay in memory and "
          "are written again every flush interval; past this many, pushes "
          "are refused with UNAVAILABLE until a flush works.");
ABSL_FLAG(int64_t, max_push_log_mb, 8192,
          "With --durability=group: while flushes fail, the push log keeps "
          "every push since the last flush that worked; past this many MiB "
          "pushes are refused with UNAVAILABLE until a flush works.");
ABSL_FLAG(int64_t, max_keys_per_request, 262144,
          "Largest number of keys one Pull or Push may carry.");
ABSL_FLAG(bool, shared_memory_answers, true,
          "A client on this machine may take pull answers in its own shared "
          "memory (a sealed memfd it names) instead of the gRPC message: "
          "one copy of the rows and no gRPC framing of them. Off: every "
          "answer goes over gRPC.");
ABSL_FLAG(int64_t, max_shared_memories, 64,
          "Clients' shared memories mapped at once; more clients are "
          "answered over gRPC. Each is unmapped once its client closed it.");
ABSL_FLAG(int64_t, eviction_interval_ms, 10000,
          "How often rows that tables' eviction policies select are deleted; "
          "0 disables the sweep.");
ABSL_FLAG(int64_t, write_buffer_mb, 64,
          "RocksDB memtable size in MiB; each column family may hold two, "
          "which counts against memory next to the tables' budgets.");
ABSL_FLAG(bool, huge_pages, true,
          "Back each table stripe's rows of 8 MiB or more with transparent "
          "huge pages (madvise): on large tables most row reads miss the TLB "
          "otherwise. Has no effect where the kernel's transparent huge "
          "pages are 'never'; turn off to keep 4 KiB pages everywhere.");
ABSL_FLAG(int64_t, memory_budget_mb, 0,
          "MiB of table rows this shard keeps in memory; tables without a "
          "budget of their own share it equally, rows past a table's share "
          "stay on disk only. 0: no shard budget.");
ABSL_FLAG(int64_t, block_cache_mb, 32,
          "RocksDB block cache in MiB, which rows read from disk (tables with "
          "a memory budget) pass through.");
ABSL_FLAG(int64_t, change_log_mb, 256,
          "Memory for recent updates kept for the change stream (serving "
          "followers); a follower further behind gets a new snapshot.");

ABSL_FLAG(std::string, etcd_endpoints, "",
          "Comma-separated host:port of etcd's client URLs. Set: this shard "
          "is one replica of a replica group coordinated through etcd "
          "(docs/ARCHITECTURE.md, Replication). Empty: not replicated.");
ABSL_FLAG(std::string, replica_id, "",
          "With --etcd_endpoints: this replica's name within its shard "
          "index's group, stable across restarts (e.g. r0, r1, r2).");
ABSL_FLAG(int, replica_index, 0,
          "With --cluster_file: which replica of shard --shard_index this is "
          "(its entry in the file's list of that shard's replicas).");
ABSL_FLAG(int, replicas, 1,
          "With --etcd_endpoints: R, the replicas per shard index (1-3).");
ABSL_FLAG(int, write_quorum, 0,
          "With --replication=replicated: W, the replicas (primary "
          "included) that must have a push durable before it is "
          "acknowledged; 0: a majority of --replicas.");
ABSL_FLAG(std::string, replication, "replicated",
          "With --etcd_endpoints: when a push is acknowledged. replicated: "
          "once W replicas have it durable (survives the loss of R - W "
          "replicas); async: once the primary has it (a failover may lose "
          "the last pushes the new primary had not received).");
ABSL_FLAG(int64_t, lease_ttl_ms, 2000,
          "With --etcd_endpoints: the primary's etcd lease. A primary that "
          "cannot renew it stops acknowledging writes, and a follower takes "
          "over once it expires (etcd rounds it up to its minimum TTL).");
ABSL_FLAG(int64_t, replication_timeout_ms, 10000,
          "With --etcd_endpoints: how long a push waits for W replicas "
          "before it fails with UNAVAILABLE (a retry is not applied twice).");
ABSL_FLAG(std::string, advertise_address, "",
          "With --etcd_endpoints: host:port where the other replicas and "
          "clients reach this one. Default: --host and the bound port.");
ABSL_FLAG(std::string, cluster_name, "strata",
          "With --etcd_endpoints: the etcd key prefix of this cluster, so "
          "that several clusters can share one etcd.");

namespace strata {
namespace {

// Pulls are served on gRPC's threads when the request pool is idle. Each
// thread that allocates gets a glibc malloc arena of its own (up to 8 per
// core), which keeps what it frees: with a pull's buffers and RocksDB's
// reads spread over gRPC's threads too, a cold-tier shard's peak memory
// rose by 30 MiB (bench/RESULTS.md). The arenas are bounded by the cores,
// unless the user tuned malloc.
void BoundMallocArenas() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.")) ||
      std::getenv("MALLOC_ARENA_MAX") != nullptr) {
    return;
  }
  mallopt(M_ARENA_MAX, std::max(2, UsableCores()));
#endif
}

// What a replicated shard runs besides its ShardService; empty when it is
// not replicated.
struct ReplicationSetup {
  std::unique_ptr<EtcdClient> etcd;
  std::unique_ptr<ReplicaGroup> group;
  std::unique_ptr<ReplicationService> service;
};

absl::StatusOr<ReplicationSetup> SetUpReplication(EmbeddingStore* store,
                                                  const std::string& data_dir,
                                                  int shard_index,
                                                  const std::string& token) {
  ReplicationSetup setup;
  const std::string endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  if (endpoints.empty()) {
    if (absl::GetFlag(FLAGS_replicas) != 1) {
      return absl::InvalidArgumentError(
          "--replicas above 1 needs --etcd_endpoints");
    }
    return setup;
  }
  if (!absl::GetFlag(FLAGS_tls_cert_file).empty()) {
    return absl::InvalidArgumentError(
        "replication between replicas does not use TLS yet: run replicated "
        "shards without --tls_cert_file (on a private network)");
  }
  STRATA_ASSIGN_OR_RETURN(AckMode mode,
                          ParseAckMode(absl::GetFlag(FLAGS_replication)));
  if (absl::GetFlag(FLAGS_lease_ttl_ms) < 1000) {
    return absl::InvalidArgumentError(
        "--lease_ttl_ms must be >= 1000 (etcd leases have whole seconds)");
  }
  EtcdClientOptions etcd_options;
  etcd_options.endpoints = absl::StrSplit(endpoints, ',', absl::SkipEmpty());
  STRATA_ASSIGN_OR_RETURN(setup.etcd, EtcdClient::Create(etcd_options));
  ReplicaGroupOptions options;
  options.store = store;
  options.data_dir = data_dir;
  options.etcd = setup.etcd.get();
  options.cluster = absl::GetFlag(FLAGS_cluster_name);
  options.shard_index = static_cast<uint32_t>(shard_index);
  options.replica_id = absl::GetFlag(FLAGS_replica_id);
  options.replicas = absl::GetFlag(FLAGS_replicas);
  options.write_quorum = absl::GetFlag(FLAGS_write_quorum);
  options.ack_mode = mode;
  options.lease_ttl = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms));
  options.replication_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_replication_timeout_ms));
  options.auth_token = token;
  STRATA_ASSIGN_OR_RETURN(setup.group, ReplicaGroup::Create(options));
  setup.service =
      std::make_unique<ReplicationService>(setup.group.get(), token);
  return setup;
}

// The replica group as this replica sees it: role, term, position, lease,
// promotions, and on the primary each follower's lag in updates.
void AddReplicationMetrics(const ReplicaGroupStatus& status,
                           MetricFamilies* families) {
  const struct {
    const char* name;
    const char* help;
    prometheus::MetricType type;
    double value;
  } series[] = {
      {"strata_replication_primary", "1 while this replica is primary.",
       prometheus::MetricType::Gauge, status.primary ? 1.0 : 0.0},
      {"strata_replication_term", "The term this replica knows.",
       prometheus::MetricType::Gauge, static_cast<double>(status.term)},
      {"strata_replication_sequence", "The last update this replica applied.",
       prometheus::MetricType::Gauge,
       static_cast<double>(status.position.sequence)},
      {"strata_replication_lease_valid",
       "1 while this replica's etcd lease is certainly held.",
       prometheus::MetricType::Gauge, status.lease_valid ? 1.0 : 0.0},
      {"strata_replication_failovers_total",
       "Times this replica became primary.", prometheus::MetricType::Counter,
       static_cast<double>(status.failovers)},
  };
  for (const auto& one : series) {
    AddSample(AddFamily(families, one.name, one.help, one.type),
              {{"replica", status.replica_id}}, one.value);
  }
  prometheus::MetricFamily& lag =
      AddFamily(families, "strata_replication_follower_lag",
                "Updates a follower has not acknowledged (on the primary).",
                prometheus::MetricType::Gauge);
  for (const auto& [follower, sequence] : status.follower_sequences) {
    AddSample(
        lag, {{"follower", follower}},
        static_cast<double>(ReplicaLag(status.position.sequence, sequence)));
  }
}

// Rows, memory and admission and eviction counters (since the shard
// started), per table.
void AddTableMetrics(const std::vector<TableStats>& tables,
                     MetricFamilies* families) {
  const struct {
    const char* name;
    const char* help;
    prometheus::MetricType type;
    uint64_t TableStats::*value;
  } series[] = {
      {"strata_table_rows", "Rows stored per table.",
       prometheus::MetricType::Gauge, &TableStats::num_rows},
      {"strata_table_memory_bytes", "Memory held per table.",
       prometheus::MetricType::Gauge, &TableStats::memory_bytes},
      {"strata_table_rows_in_memory",
       "Rows per table held in memory (the others are on disk only).",
       prometheus::MetricType::Gauge, &TableStats::rows_in_memory},
      {"strata_table_admitted_keys_total", "Keys given a row by a push.",
       prometheus::MetricType::Counter, &TableStats::admitted_keys},
      {"strata_table_rejected_gradients_total",
       "Gradients dropped because admission refused their key.",
       prometheus::MetricType::Counter, &TableStats::rejected_gradients},
      {"strata_table_evicted_rows_total", "Rows deleted by eviction.",
       prometheus::MetricType::Counter, &TableStats::evicted_rows},
  };
  for (const auto& one : series) {
    prometheus::MetricFamily& family =
        AddFamily(families, one.name, one.help, one.type);
    for (const TableStats& t : tables) {
      AddSample(family, {{"table", t.config.name}},
                static_cast<double>(t.*one.value));
    }
  }
}

// RocksDB's own numbers that matter when a shard slows down: memtables
// waiting to flush, compaction backlog, files on disk, the block cache.
void AddStorageMetrics(const StorageStats& stats, MetricFamilies* families) {
  const struct {
    const char* name;
    const char* help;
    uint64_t value;
  } gauges[] = {
      {"strata_store_memtable_bytes", "Bytes in RocksDB memtables.",
       stats.memtable_bytes},
      {"strata_store_immutable_memtables", "Full memtables waiting to flush.",
       stats.immutable_memtables},
      {"strata_store_pending_compaction_bytes",
       "Bytes RocksDB estimates compaction must rewrite.",
       stats.pending_compaction_bytes},
      {"strata_store_running_flushes", "Memtable flushes running.",
       stats.running_flushes},
      {"strata_store_running_compactions", "Compactions running.",
       stats.running_compactions},
      {"strata_store_sst_bytes", "Bytes of SST files on disk.",
       stats.sst_bytes},
      {"strata_store_block_cache_bytes", "Bytes of the block cache in use.",
       stats.block_cache_bytes},
      {"strata_store_unwritten_rows",
       "Rows a failed flush left in memory to write again (periodic and "
       "group durability); 0 once a flush works.",
       stats.unwritten_rows},
      {"strata_store_push_log_bytes",
       "Bytes of acknowledged pushes in the push log, not yet flushed to "
       "the store's files (group durability).",
       stats.push_log_bytes},
      {"strata_store_write_failing",
       "1 while the last write to the store failed.",
       stats.write_error.empty() ? 0u : 1u},
  };
  for (const auto& gauge : gauges) {
    AddGauge(families, gauge.name, gauge.help,
             static_cast<double>(gauge.value));
  }
  AddCounter(families, "strata_store_failed_writes_total",
             "Writes to the store that failed.",
             static_cast<double>(stats.failed_writes));
}

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;

// SetShardMap keeps a map of another shard count (SHARD_MAP) before it
// records the count in SHARD_PLACEMENT, so a crash between the two leaves
// the placement one count behind the map. A restart with the map's count
// and the placement's index finishes the change.
absl::Status CatchUpPlacementWithMap(const std::string& data_dir,
                                     int shard_index, int num_shards) {
  FileSystem& files = *FileSystem::Default();
  absl::StatusOr<ShardMap> map =
      CreateFileShardMapStore(&files, data_dir)->Read();
  if (absl::IsNotFound(map.status())) return absl::OkStatus();
  if (!map.ok()) return map.status();
  absl::StatusOr<ShardPlacement> placement =
      ReadShardPlacement(files, data_dir);
  if (absl::IsNotFound(placement.status())) return absl::OkStatus();
  if (!placement.ok()) return placement.status();
  const uint32_t count = static_cast<uint32_t>(num_shards);
  if (map->num_shards() != count || placement->num_shards == count ||
      placement->shard_index != static_cast<uint32_t>(shard_index)) {
    return absl::OkStatus();
  }
  STRATA_LOG(WARNING, "server")
      << data_dir << ": the shard map has " << count
      << " shards but the placement still says " << placement->num_shards
      << " (a stop between the two writes of a shard count change): "
         "recording "
      << count;
  placement->num_shards = count;
  return WriteShardPlacement(files, data_dir, *placement);
}

// The data directory's placement against the flags
// (server/shard_placement.h): kExitOk, or, logged, kExitUsage for another
// placement and kExitRuntimeError when it cannot be read or written.
int PlacementExitCode(const std::string& data_dir, int shard_index,
                      int num_shards) {
  if (absl::Status caught_up =
          CatchUpPlacementWithMap(data_dir, shard_index, num_shards);
      !caught_up.ok()) {
    STRATA_LOG(ERROR, "server") << caught_up.message();
    return kExitRuntimeError;
  }
  ShardPlacement placement;
  placement.shard_index = static_cast<uint32_t>(shard_index);
  placement.num_shards = static_cast<uint32_t>(num_shards);
  const absl::Status placed =
      CheckShardPlacement(*FileSystem::Default(), data_dir, placement);
  if (placed.ok()) return kExitOk;
  STRATA_LOG(ERROR, "server") << placed.message();
  return absl::IsFailedPrecondition(placed) ? kExitUsage : kExitRuntimeError;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-server: %s (see --help)\n", message.c_str());
  return kExitUsage;
}

int Run() {
  LogLevel level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level).c_str(), &level)) {
    return UsageError("--log_level must be debug, info, warning or error");
  }
  SetMinLogLevel(level);
  const int num_shards = absl::GetFlag(FLAGS_num_shards);
  const int shard_index = absl::GetFlag(FLAGS_shard_index);
  if (num_shards < 1) return UsageError("--num_shards must be >= 1");
  if (shard_index < 0 || shard_index >= num_shards) {
    return UsageError(absl::StrCat("--shard_index ", shard_index,
                                   " is outside 0..", num_shards - 1));
  }
  if (absl::GetFlag(FLAGS_data_dir).empty()) {
    return UsageError("--data_dir is required");
  }
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) return UsageError("--port is outside 0..65535");
  if (absl::GetFlag(FLAGS_max_shared_memories) < 1) {
    return UsageError("--max_shared_memories must be >= 1");
  }
  if (absl::GetFlag(FLAGS_max_keys_per_request) < 1) {
    return UsageError("--max_keys_per_request must be >= 1");
  }
  absl::StatusOr<Durability> durability =
      ParseDurability(absl::GetFlag(FLAGS_durability));
  if (!durability.ok()) {
    return UsageError(std::string(durability.status().message()));
  }
  if (absl::GetFlag(FLAGS_change_log_mb) < 1) {
    return UsageError("--change_log_mb must be >= 1");
  }
  if (absl::GetFlag(FLAGS_write_buffer_mb) < 1) {
    return UsageError("--write_buffer_mb must be >= 1");
  }
  if (absl::GetFlag(FLAGS_memory_budget_mb) < 0) {
    return UsageError("--memory_budget_mb must be >= 0");
  }
  if (absl::Status fits = CheckFitsInMemory(
          "--memory_budget_mb",
          static_cast<uint64_t>(absl::GetFlag(FLAGS_memory_budget_mb)) << 20);
      !fits.ok()) {
    return UsageError(std::string(fits.message()));
  }
  if (absl::GetFlag(FLAGS_request_threads) < 0) {
    return UsageError("--request_threads must be >= 0");
  }
  if (const int nice = absl::GetFlag(FLAGS_request_thread_nice);
      nice < 0 || nice > 19) {
    return UsageError("--request_thread_nice must be in [0, 19]");
  }
  if (absl::GetFlag(FLAGS_max_queued_requests) < 1) {
    return UsageError("--max_queued_requests must be >= 1");
  }
  if (!(absl::GetFlag(FLAGS_max_queue_wait_ms) >= 0)) {
    return UsageError("--max_queue_wait_ms must be >= 0");
  }
  if (absl::GetFlag(FLAGS_max_subscribers) < 1) {
    return UsageError("--max_subscribers must be >= 1");
  }
  if (!(absl::GetFlag(FLAGS_max_move_pause_s) > 0)) {
    return UsageError("--max_move_pause_s must be > 0");
  }
  if (absl::GetFlag(FLAGS_subscriber_stall_timeout_s) < 1) {
    return UsageError("--subscriber_stall_timeout_s must be >= 1");
  }
  if (absl::GetFlag(FLAGS_push_window_ttl_s) < 1) {
    return UsageError("--push_window_ttl_s must be >= 1");
  }
  if (absl::GetFlag(FLAGS_max_push_windows) < 1) {
    return UsageError("--max_push_windows must be >= 1");
  }
  if (absl::GetFlag(FLAGS_max_unwritten_rows) < 1) {
    return UsageError("--max_unwritten_rows must be >= 1");
  }
  if (absl::GetFlag(FLAGS_max_push_log_mb) < 1 ||
      absl::GetFlag(FLAGS_max_push_log_mb) > (int64_t{1} << 30)) {
    return UsageError("--max_push_log_mb must be between 1 and 2^30");
  }
  if (absl::GetFlag(FLAGS_block_cache_mb) < 1) {
    return UsageError("--block_cache_mb must be >= 1");
  }
  if (absl::GetFlag(FLAGS_flush_interval_ms) < 1) {
    return UsageError("--flush_interval_ms must be >= 1");
  }

  absl::StatusOr<DaemonSecurity> security = LoadDaemonSecurity(
      absl::GetFlag(FLAGS_tls_cert_file), absl::GetFlag(FLAGS_tls_key_file),
      absl::GetFlag(FLAGS_tls_client_ca_file),
      absl::GetFlag(FLAGS_auth_token_file));
  if (!security.ok()) {
    STRATA_LOG(ERROR, "server") << security.status().message();
    return kExitRuntimeError;
  }
  if (absl::GetFlag(FLAGS_auth_reads) && security->auth_token.empty()) {
    return UsageError("--auth_reads needs --auth_token_file");
  }
  WarnIfUnprotected("server", absl::GetFlag(FLAGS_host), *security);

  // Block the stop signals in every thread; the main thread waits for them.
  const sigset_t stop_signals = BlockStopSignals();

  SetHugePagesEnabled(absl::GetFlag(FLAGS_huge_pages));
  EmbeddingStoreOptions store_options;
  store_options.data_dir = absl::GetFlag(FLAGS_data_dir);
  store_options.durability = *durability;
  store_options.flush_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_flush_interval_ms));
  store_options.memory_budget_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_memory_budget_mb)) << 20;
  store_options.push_window_ttl =
      absl::Seconds(absl::GetFlag(FLAGS_push_window_ttl_s));
  store_options.max_push_windows =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_push_windows));
  store_options.max_unwritten_rows =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_unwritten_rows));
  store_options.max_push_log_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_push_log_mb)) << 20;
  store_options.block_cache_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_block_cache_mb)) << 20;
  store_options.write_buffer_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_write_buffer_mb)) << 20;
  store_options.eviction_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_eviction_interval_ms));
  store_options.change_log_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_change_log_mb)) << 20;
  const bool data_dir_existed =
      FileSystem::Default()->IsDirectory(store_options.data_dir);
  if (data_dir_existed) {
    const int placed =
        PlacementExitCode(store_options.data_dir, shard_index, num_shards);
    if (placed != kExitOk) return placed;
  }
  absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
      EmbeddingStore::Open(store_options);
  if (!store.ok()) {
    STRATA_LOG(ERROR, "server")
        << "cannot open --data_dir " << store_options.data_dir << ": "
        << store.status();
    return kExitRuntimeError;
  }

  // A directory in use is checked before the store opens (nothing of a
  // misplaced one is recovered or started); a new one is recorded once the
  // store created it.
  if (!data_dir_existed) {
    const int placed =
        PlacementExitCode(store_options.data_dir, shard_index, num_shards);
    if (placed != kExitOk) return placed;
  }

  absl::StatusOr<ReplicationSetup> replication = SetUpReplication(
      store->get(), store_options.data_dir, shard_index, security->auth_token);
  if (!replication.ok()) {
    STRATA_LOG(ERROR, "server") << replication.status().message();
    return absl::IsInvalidArgument(replication.status()) ? kExitUsage
                                                         : kExitRuntimeError;
  }

  // The shard map: in etcd for a cluster coordinated through it, else in the
  // data directory.
  std::unique_ptr<ShardMapStore> map_store =
      replication->etcd != nullptr
          ? CreateEtcdShardMapStore(replication->etcd.get(),
                                    absl::GetFlag(FLAGS_cluster_name))
          : CreateFileShardMapStore(FileSystem::Default(),
                                    store_options.data_dir);
  absl::StatusOr<ShardMap> shard_map =
      map_store->LoadOrCreate(static_cast<uint32_t>(num_shards));
  if (!shard_map.ok()) {
    STRATA_LOG(ERROR, "server") << shard_map.status().message();
    return absl::IsFailedPrecondition(shard_map.status()) ? kExitUsage
                                                          : kExitRuntimeError;
  }
  STRATA_LOG(INFO, "server")
      << "shard map " << shard_map->Summary() << " from " << map_store->Where();

  ShardServiceOptions service_options;
  service_options.store = store->get();
  service_options.shard_map =
      std::make_shared<const ShardMap>(*std::move(shard_map));
  service_options.shard_map_store = map_store.get();
  service_options.data_dir = store_options.data_dir;
  service_options.replica_group = replication->group.get();
  service_options.shard_index = static_cast<uint32_t>(shard_index);
  service_options.num_shards = static_cast<uint32_t>(num_shards);
  service_options.max_keys_per_request =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_keys_per_request));
  service_options.auth_token = security->auth_token;
  service_options.auth_reads = absl::GetFlag(FLAGS_auth_reads);
  service_options.max_subscribers = absl::GetFlag(FLAGS_max_subscribers);
  service_options.request_threads = absl::GetFlag(FLAGS_request_threads);
  service_options.request_thread_nice =
      absl::GetFlag(FLAGS_request_thread_nice);
  service_options.max_queued_requests =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_queued_requests));
  service_options.max_queue_wait =
      absl::Milliseconds(absl::GetFlag(FLAGS_max_queue_wait_ms));
  service_options.max_move_pause =
      absl::Seconds(absl::GetFlag(FLAGS_max_move_pause_s));
  service_options.subscriber_stall_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_subscriber_stall_timeout_s));
  service_options.shared_memory_answers =
      absl::GetFlag(FLAGS_shared_memory_answers);
  service_options.max_shared_memories =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_shared_memories));
  ShardService service(service_options);

  // Every shard also serves the rendezvous of training jobs' ranks, so that
  // a cluster needs nothing else for them to find each other.
  RendezvousServiceOptions rendezvous_options;
  rendezvous_options.auth_token = security->auth_token;
  RendezvousService rendezvous(rendezvous_options);

  std::vector<grpc::Service*> services = {&service, &rendezvous};
  if (replication->service) services.push_back(replication->service.get());
  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> started =
      StartGrpcServer(absl::GetFlag(FLAGS_host), port, services, &bound_port,
                      security->credentials);
  if (!started.ok()) {
    STRATA_LOG(ERROR, "server") << started.status().message();
    return kExitRuntimeError;
  }
  std::unique_ptr<grpc::Server> server = *std::move(started);

  // The status page's charts: a sample of the traffic every second.
  TrafficHistory traffic(&service.metrics());
  std::optional<PeriodicTask> sampler;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    sampler.emplace(absl::Seconds(1),
                    [&traffic] { traffic.Sample(absl::Now()); });
  }
  HttpServer http;
  int metrics_port = -1;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    // A page for people: charts of the last minutes and the numbers of
    // /metrics, reloading itself.
    http.Handle("/status", [&] {
      ShardStatusView view;
      view.shard_index = static_cast<uint32_t>(shard_index);
      view.num_shards = static_cast<uint32_t>(num_shards);
      view.durability = std::string(DurabilityName(*durability));
      view.tables = (*store)->ListTables();
      view.storage = (*store)->GetStorageStats();
      view.metrics = &service.metrics();
      view.history = traffic.Samples();
      ReplicaGroupStatus group;
      if (replication->group) {
        group = replication->group->GetStatus();
        view.replication = &group;
      }
      return HttpServer::Response{200, "text/html; charset=utf-8",
                                  RenderShardStatusPage(view, 2)};
    });
    http.Handle("/healthz", [] {
      return HttpServer::Response{200, "text/plain", "ok\n"};
    });
    http.Handle("/metrics", [&service, &rendezvous, &store, &replication] {
      MetricFamilies families;
      AddBuildInfo(&families, "strata-server");
      AddProcessMetrics(&families);
      service.metrics().AddMetrics(&families);
      rendezvous.AddMetrics(&families);
      AddTableMetrics((*store)->ListTables(), &families);
      AddStorageMetrics((*store)->GetStorageStats(), &families);
      AddGauge(&families, "strata_server_shard_map_version",
               "Version of the shard map this shard serves by.",
               static_cast<double>(service.shard_map()->version()));
      AddGauge(&families, "strata_server_shared_memories",
               "Clients' shared memories for pull answers mapped now.",
               static_cast<double>(service.shared_memories()));
      if (replication->group) {
        AddReplicationMetrics(replication->group->GetStatus(), &families);
      }
      return HttpServer::Response{200, kMetricsContentType,
                                  MetricsText(families)};
    });
    absl::StatusOr<int> http_port = http.Start(
        absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_metrics_port));
    if (!http_port.ok()) {
      STRATA_LOG(ERROR, "server") << http_port.status().message();
      server->Shutdown();
      return kExitRuntimeError;
    }
    metrics_port = *http_port;
  }

  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    absl::Status written =
        WritePortFile(absl::GetFlag(FLAGS_port_file), bound_port);
    if (!written.ok()) {
      STRATA_LOG(ERROR, "server") << written.message();
      server->Shutdown();
      return kExitRuntimeError;
    }
  }
  if (replication->group) {
    std::string advertised = absl::GetFlag(FLAGS_advertise_address);
    if (advertised.empty()) {
      advertised = absl::StrCat(absl::GetFlag(FLAGS_host), ":", bound_port);
    }
    replication->group->Start(advertised);
  }
  STRATA_LOG(INFO, "server")
      << "shard " << shard_index << "/" << num_shards << " serving on "
      << absl::GetFlag(FLAGS_host) << ":" << bound_port
      << " data_dir=" << store_options.data_dir
      << " durability=" << DurabilityName(*durability)
      << " metrics_port=" << metrics_port
      << " max_keys_per_request=" << service_options.max_keys_per_request
      << " tls=" << (security->tls ? "on" : "off") << " client_certs="
      << (absl::GetFlag(FLAGS_tls_client_ca_file).empty() ? "off" : "on")
      << " auth=" << (security->auth_token.empty() ? "off" : "on")
      << " auth_reads=" << (service_options.auth_reads ? "on" : "off")
      << " shared_memory_answers="
      << (service_options.shared_memory_answers ? "on" : "off")
      << " rendezvous=on replication="
      << (replication->group ? absl::GetFlag(FLAGS_replication) : "off");

  const int signal_number = WaitForStopSignal(stop_signals);
  STRATA_LOG(INFO, "server")
      << "received signal " << signal_number << ", draining";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  http.Stop();
  sampler.reset();
  // Hands the primary role over before the store closes.
  replication->group.reset();
  absl::Status flushed = (*store)->Flush();
  store->reset();
  if (!flushed.ok()) {
    STRATA_LOG(ERROR, "server") << "final flush failed: " << flushed;
    return kExitRuntimeError;
  }
  STRATA_LOG(INFO, "server") << "stopped cleanly";
  return kExitOk;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::ParseCommandLineWithCluster(
      "One shard of the Strata training parameter server. Its gRPC port "
      "also serves the Rendezvous service (strata.v1.Rendezvous), through "
      "which the ranks of a training job exchange their addresses.\n"
      "Example: strata-server --port=50051 --shard_index=0 --num_shards=2 "
      "--data_dir=/var/lib/strata/shard0 --durability=group\n"
      "  or: strata-server --cluster_file=cluster.yaml --shard_index=0",
      argc, argv, strata::ClusterRole::kShard);
  strata::BoundMallocArenas();
  return strata::Run();
}
