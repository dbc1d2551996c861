// stratactl commands that manage the cluster: create-table, tables, stats,
// checkpoint, restore and health.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/table_policy_flags.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(int64_t, dim, 0, "create-table: embedding dimension (required).");
ABSL_FLAG(std::string, optimizer, "adagrad",
          "create-table: sgd, adagrad, adam or ftrl.");
ABSL_FLAG(double, learning_rate, 0,
          "create-table: learning rate (FTRL alpha); 0 takes the server "
          "default (0.01).");
ABSL_FLAG(
    double, initial_accumulator, 0,
    "create-table: Adagrad accumulator start; 0 takes the default (0.1).");
ABSL_FLAG(double, epsilon, 0,
          "create-table: Adagrad/Adam epsilon; 0 takes the default (1e-7).");
ABSL_FLAG(double, beta1, 0, "create-table: Adam beta1; 0: default (0.9).");
ABSL_FLAG(double, beta2, 0, "create-table: Adam beta2; 0: default (0.999).");
ABSL_FLAG(double, ftrl_beta, 0, "create-table: FTRL beta; 0: default (1).");
ABSL_FLAG(double, l1, 0, "create-table: FTRL L1 regularization.");
ABSL_FLAG(double, l2, 0, "create-table: FTRL L2 regularization.");
ABSL_FLAG(std::string, initializer, "zeros",
          "create-table: initial rows: zeros, constant, uniform or "
          "truncated_normal.");
ABSL_FLAG(double, init_value, 0, "create-table: value of 'constant'.");
ABSL_FLAG(double, init_min, -0.05, "create-table: lower bound of 'uniform'.");
ABSL_FLAG(double, init_max, 0.05, "create-table: upper bound of 'uniform'.");
ABSL_FLAG(double, init_mean, 0, "create-table: mean of 'truncated_normal'.");
ABSL_FLAG(double, init_stddev, 0.05,
          "create-table: standard deviation of 'truncated_normal' (cut at "
          "two).");
ABSL_FLAG(uint64_t, seed, 0,
          "create-table: initial rows are a pure function of (seed, key).");
ABSL_FLAG(uint64_t, global_step, 0, "checkpoint: global step to tag it with.");
ABSL_FLAG(bool, incremental, false,
          "checkpoint: only the rows changed since each shard's previous "
          "checkpoint (one it took or restored since it started).");

namespace strata {
namespace tools_internal {
std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.1f %s", value, units[unit]);
}

namespace {

std::string OptimizerName(v1::OptimizerType type) {
  return absl::AsciiStrToLower(v1::OptimizerType_Name(type));
}

std::string InitializerName(v1::InitializerType type) {
  return absl::AsciiStrToLower(v1::InitializerType_Name(type));
}

// The table config the create-table flags describe, or a usage error.
absl::StatusOr<v1::TableConfig> TableConfigFromFlags(const std::string& name) {
  v1::TableConfig config;
  config.set_name(name);
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  if (dim <= 0 || dim > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("create-table needs --dim=N with N >= 1");
  }
  config.set_dim(static_cast<uint32_t>(dim));
  config.set_seed(absl::GetFlag(FLAGS_seed));
  v1::OptimizerType optimizer;
  if (!v1::OptimizerType_Parse(
          absl::AsciiStrToUpper(absl::GetFlag(FLAGS_optimizer)), &optimizer) ||
      optimizer == v1::OPTIMIZER_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd, adagrad, adam or ftrl, not '",
                     absl::GetFlag(FLAGS_optimizer), "'"));
  }
  v1::OptimizerConfig* opt = config.mutable_optimizer();
  opt->set_type(optimizer);
  opt->set_learning_rate(absl::GetFlag(FLAGS_learning_rate));
  opt->set_initial_accumulator(absl::GetFlag(FLAGS_initial_accumulator));
  opt->set_epsilon(absl::GetFlag(FLAGS_epsilon));
  opt->set_beta1(absl::GetFlag(FLAGS_beta1));
  opt->set_beta2(absl::GetFlag(FLAGS_beta2));
  opt->set_ftrl_beta(absl::GetFlag(FLAGS_ftrl_beta));
  opt->set_l1(absl::GetFlag(FLAGS_l1));
  opt->set_l2(absl::GetFlag(FLAGS_l2));
  v1::InitializerType initializer;
  if (!v1::InitializerType_Parse(
          absl::AsciiStrToUpper(absl::GetFlag(FLAGS_initializer)),
          &initializer) ||
      initializer == v1::INITIALIZER_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--initializer must be zeros, constant, uniform or truncated_normal, "
        "not '",
        absl::GetFlag(FLAGS_initializer), "'"));
  }
  v1::InitializerConfig* init = config.mutable_initializer();
  init->set_type(initializer);
  init->set_value(absl::GetFlag(FLAGS_init_value));
  init->set_min(absl::GetFlag(FLAGS_init_min));
  init->set_max(absl::GetFlag(FLAGS_init_max));
  init->set_mean(absl::GetFlag(FLAGS_init_mean));
  init->set_stddev(absl::GetFlag(FLAGS_init_stddev));
  SetTablePoliciesFromFlags(config);
  return config;
}

void WriteTableJson(const v1::TableInfo& info, JsonWriter& json) {
  const v1::TableConfig& config = info.config();
  json.BeginObject();
  json.Key("name").String(config.name());
  json.Key("dim").Uint(config.dim());
  json.Key("optimizer").String(OptimizerName(config.optimizer().type()));
  json.Key("learning_rate").Float(config.optimizer().learning_rate());
  json.Key("initializer").String(InitializerName(config.initializer().type()));
  json.Key("seed").Uint(config.seed());
  json.Key("rows").Uint(info.num_rows());
  json.Key("rows_in_memory").Uint(info.rows_in_memory());
  json.Key("rows_on_disk_only")
      .Uint(info.num_rows() - std::min(info.num_rows(), info.rows_in_memory()));
  json.Key("memory_budget_bytes").Uint(config.memory_budget_bytes());
  json.Key("memory_bytes").Uint(info.memory_bytes());
  json.Key("admitted_keys").Uint(info.admitted_keys());
  json.Key("rejected_gradients").Uint(info.rejected_gradients());
  json.Key("evicted_rows").Uint(info.evicted_rows());
  json.EndObject();
}

// Left-aligned columns, two spaces apart.
void PrintColumns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 2, ' ');
    }
    PrintLine(line);
  }
}

}  // namespace

int CreateTableCommand(const CommandContext& context) {
  absl::StatusOr<v1::TableConfig> config =
      TableConfigFromFlags(context.args[0]);
  if (!config.ok()) return UsageError(config.status().message());
  // PsClient::CreateTable does not say whether the table was new, so look
  // first; CreateTable still checks that an existing table is identical.
  absl::StatusOr<std::vector<v1::TableInfo>> before =
      context.client->ListTables();
  if (!before.ok()) return ClusterError(before.status());
  bool existed = false;
  for (const v1::TableInfo& info : *before) {
    existed = existed || info.config().name() == config->name();
  }
  const absl::Status status = context.client->CreateTable(*config);
  if (!status.ok()) return ClusterError(status);
  if (context.json) {
    JsonWriter json;
    json.BeginObject();
    json.Key("table").String(config->name());
    json.Key("created").Bool(!existed);
    json.Key("dim").Uint(config->dim());
    json.Key("optimizer").String(OptimizerName(config->optimizer().type()));
    json.Key("initializer")
        .String(InitializerName(config->initializer().type()));
    json.EndObject();
    PrintLine(json.text());
  } else {
    PrintLine(absl::StrCat(
        existed ? "table '" : "created table '", config->name(), "'",
        existed ? " already exists with this config" : "", ": dim=",
        config->dim(), " optimizer=", OptimizerName(config->optimizer().type()),
        " initializer=", InitializerName(config->initializer().type())));
  }
  return kExitOk;
}

int TablesCommand(const CommandContext& context) {
  absl::StatusOr<std::vector<v1::TableInfo>> tables =
      context.client->ListTables();
  if (!tables.ok()) return ClusterError(tables.status());
  if (context.json) {
    JsonWriter json;
    json.BeginObject().Key("tables").BeginArray();
    for (const v1::TableInfo& info : *tables) WriteTableJson(info, json);
    json.EndArray().EndObject();
    PrintLine(json.text());
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "DIM", "OPTIMIZER", "INITIALIZER", "ROWS", "IN_MEMORY", "MEMORY",
       "BUDGET", "ADMITTED", "REJECTED", "EVICTED"}};
  for (const v1::TableInfo& info : *tables) {
    rows.push_back({info.config().name(), absl::StrCat(info.config().dim()),
                    OptimizerName(info.config().optimizer().type()),
                    InitializerName(info.config().initializer().type()),
                    absl::StrCat(info.num_rows()),
                    absl::StrCat(info.rows_in_memory()),
                    HumanBytes(info.memory_bytes()),
                    info.config().memory_budget_bytes() == 0
                        ? "-"
                        : HumanBytes(info.config().memory_budget_bytes()),
                    absl::StrCat(info.admitted_keys()),
                    absl::StrCat(info.rejected_gradients()),
                    absl::StrCat(info.evicted_rows())});
  }
  PrintColumns(rows);
  return kExitOk;
}

int ShardMapCommand(const CommandContext& context) {
  if (absl::Status refreshed = context.client->RefreshShardMap();
      !refreshed.ok()) {
    return ClusterError(refreshed);
  }
  absl::StatusOr<std::vector<v1::StatsResponse>> stats =
      context.client->Stats();
  if (!stats.ok()) return ClusterError(stats.status());
  const std::shared_ptr<const ShardMap> map = context.client->shard_map();
  JsonWriter json;
  json.BeginObject();
  json.Key("version").Uint(map->version());
  json.Key("num_shards").Uint(map->num_shards());
  json.Key("shards").BeginArray();
  if (!context.json) {
    PrintLine(absl::StrCat("shard map version ", map->version(), ": ",
                           map->num_shards(), " shards, ", kNumBuckets,
                           " buckets"));
  }
  bool behind = false;
  for (size_t s = 0; s < stats->size(); ++s) {
    const size_t buckets = map->BucketsOf(static_cast<uint32_t>(s)).size();
    const uint64_t served = (*stats)[s].shard_map_version();
    behind |= served != map->version();
    if (!context.json) {
      PrintLine(absl::StrCat("  shard ", s, " ", ShardAddress(context, s), ": ",
                             buckets, " buckets, serves version ", served,
                             served == map->version() ? "" : " (behind)"));
      continue;
    }
    json.BeginObject();
    json.Key("address").String(ShardAddress(context, s));
    json.Key("buckets").Uint(buckets);
    json.Key("serves_version").Uint(served);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  if (context.json) PrintLine(json.text());
  // Not an error: a shard whose buckets did not change may lag.
  if (behind && !context.json) {
    PrintLine(
        "  (a shard behind serves by its own map: in etcd it reads the newest "
        "when a request routed by it arrives; a static shard gets it from "
        "SetShardMap)");
  }
  return kExitOk;
}

int StatsCommand(const CommandContext& context) {
  absl::StatusOr<std::vector<v1::StatsResponse>> stats =
      context.client->Stats();
  if (!stats.ok()) return ClusterError(stats.status());
  JsonWriter json;
  json.BeginObject().Key("shards").BeginArray();
  for (size_t s = 0; s < stats->size(); ++s) {
    const v1::StatsResponse& shard = (*stats)[s];
    const std::string address = ShardAddress(context, s);
    if (shard.shard_index() != s || shard.num_shards() != stats->size()) {
      std::fprintf(stderr,
                   "stratactl: warning: %s says it is shard %u of %u, but "
                   "the shard map has it as shard %zu of %zu\n",
                   address.c_str(), shard.shard_index(), shard.num_shards(), s,
                   stats->size());
    }
    if (!context.json) {
      PrintLine(absl::StrFormat("shard %u/%u %s durability=%s uptime=%.1fs",
                                shard.shard_index(), shard.num_shards(),
                                address, shard.durability(),
                                shard.uptime_seconds()));
      PrintLine(absl::StrCat("  requests: pull=", shard.pull_requests(),
                             " push=", shard.push_requests(),
                             " failed=", shard.failed_requests(),
                             "  keys: pulled=", shard.keys_pulled(),
                             " pushed=", shard.keys_pushed(),
                             "  duplicate_pushes=", shard.duplicate_pushes()));
      for (const v1::TableInfo& table : shard.tables()) {
        PrintLine(absl::StrCat("  table ", table.config().name(),
                               ": rows=", table.num_rows(),
                               " memory=", HumanBytes(table.memory_bytes())));
      }
      PrintLine(absl::StrCat("  checkpoints: ",
                             shard.checkpoints().empty()
                                 ? "(none)"
                                 : absl::StrJoin(shard.checkpoints(), ", ")));
      continue;
    }
    json.BeginObject();
    json.Key("address").String(address);
    json.Key("shard_index").Uint(shard.shard_index());
    json.Key("num_shards").Uint(shard.num_shards());
    json.Key("durability").String(shard.durability());
    json.Key("uptime_seconds").Double(shard.uptime_seconds());
    json.Key("pull_requests").Uint(shard.pull_requests());
    json.Key("push_requests").Uint(shard.push_requests());
    json.Key("keys_pulled").Uint(shard.keys_pulled());
    json.Key("keys_pushed").Uint(shard.keys_pushed());
    json.Key("duplicate_pushes").Uint(shard.duplicate_pushes());
    json.Key("failed_requests").Uint(shard.failed_requests());
    json.Key("tables").BeginArray();
    for (const v1::TableInfo& table : shard.tables()) {
      WriteTableJson(table, json);
    }
    json.EndArray();
    json.Key("checkpoints").BeginArray();
    for (const std::string& checkpoint : shard.checkpoints()) {
      json.String(checkpoint);
    }
    json.EndArray();
    json.EndObject();
  }
  json.EndArray().EndObject();
  if (context.json) PrintLine(json.text());
  return kExitOk;
}

int CheckpointCommand(const CommandContext& context) {
  const std::string id = context.args.empty() ? "" : context.args[0];
  const uint64_t step = absl::GetFlag(FLAGS_global_step);
  const bool incremental = absl::GetFlag(FLAGS_incremental);
  absl::StatusOr<std::vector<v1::CheckpointResponse>> shards =
      context.client->Checkpoint(id, step, incremental);
  if (!shards.ok()) return ClusterError(shards.status());
  uint64_t rows = 0, delta_rows = 0;
  for (const v1::CheckpointResponse& shard : *shards) {
    rows += shard.num_rows();
    delta_rows += shard.delta_rows();
  }
  const std::string& name =
      shards->empty() ? id : shards->front().checkpoint_id();
  const uint64_t global_step =
      shards->empty() ? step : shards->front().global_step();
  if (!context.json) {
    std::string line =
        absl::StrCat("checkpoint '", name, "' global_step=", global_step,
                     " rows=", rows, " shards=", shards->size());
    if (incremental) {
      absl::StrAppend(&line, " incremental: changed_rows=", delta_rows,
                      " parents=");
      for (size_t s = 0; s < shards->size(); ++s) {
        absl::StrAppend(&line, s == 0 ? "" : ",", (*shards)[s].parent_id());
      }
    }
    PrintLine(line);
    return kExitOk;
  }
  JsonWriter json;
  json.BeginObject();
  json.Key("checkpoint_id").String(name);
  json.Key("global_step").Uint(global_step);
  json.Key("num_rows").Uint(rows);
  json.Key("incremental").Bool(incremental);
  json.Key("delta_rows").Uint(delta_rows);
  json.Key("shards").BeginArray();
  for (size_t s = 0; s < shards->size(); ++s) {
    json.BeginObject();
    json.Key("address").String(ShardAddress(context, s));
    json.Key("num_rows").Uint((*shards)[s].num_rows());
    json.Key("parent_id").String((*shards)[s].parent_id());
    json.Key("delta_rows").Uint((*shards)[s].delta_rows());
    json.EndObject();
  }
  json.EndArray().EndObject();
  PrintLine(json.text());
  return kExitOk;
}

int RestoreCommand(const CommandContext& context) {
  const std::string& id = context.args[0];
  absl::StatusOr<std::vector<v1::RestoreResponse>> shards =
      context.client->Restore(id);
  if (!shards.ok()) return ClusterError(shards.status());
  uint64_t rows = 0;
  for (const v1::RestoreResponse& shard : *shards) rows += shard.num_rows();
  const uint64_t step = shards->empty() ? 0 : shards->front().global_step();
  if (!context.json) {
    PrintLine(absl::StrCat("restored checkpoint '", id, "' global_step=", step,
                           " rows=", rows, " shards=", shards->size()));
    return kExitOk;
  }
  JsonWriter json;
  json.BeginObject();
  json.Key("checkpoint_id").String(id);
  json.Key("global_step").Uint(step);
  json.Key("num_rows").Uint(rows);
  json.Key("shards").BeginArray();
  for (size_t s = 0; s < shards->size(); ++s) {
    json.BeginObject();
    json.Key("address").String(ShardAddress(context, s));
    json.Key("global_step").Uint((*shards)[s].global_step());
    json.Key("num_rows").Uint((*shards)[s].num_rows());
    json.EndObject();
  }
  json.EndArray().EndObject();
  PrintLine(json.text());
  return kExitOk;
}

int HealthCommand(const CommandContext& context) {
  // One single-shard client per shard, checked concurrently, so that the
  // answer names every shard that is down rather than the first one.
  const std::vector<std::string>& addresses =
      context.client_options.shard_addresses;
  std::vector<absl::Status> results(addresses.size());
  std::vector<std::thread> threads;
  for (size_t s = 0; s < addresses.size(); ++s) {
    threads.emplace_back([&context, &addresses, &results, s] {
      PsClientOptions options = context.client_options;
      options.shard_addresses = {addresses[s]};
      absl::StatusOr<std::unique_ptr<PsClient>> client =
          PsClient::Create(options);
      results[s] = client.ok() ? (*client)->CheckHealth() : client.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  size_t unhealthy = 0;
  JsonWriter json;
  json.BeginObject().Key("shards").BeginArray();
  for (size_t s = 0; s < addresses.size(); ++s) {
    const absl::Status& status = results[s];
    if (!status.ok()) ++unhealthy;
    const std::string code =
        status.ok() ? "SERVING" : absl::StatusCodeToString(status.code());
    if (!context.json) {
      PrintLine(absl::StrCat("shard ", s, " ", addresses[s], ": ", code,
                             status.ok() ? "" : ": ", status.message()));
      continue;
    }
    json.BeginObject();
    json.Key("shard").Uint(s);
    json.Key("address").String(addresses[s]);
    json.Key("serving").Bool(status.ok());
    json.Key("status").String(code);
    if (!status.ok()) json.Key("message").String(status.message());
    json.EndObject();
  }
  json.EndArray().Key("healthy").Bool(unhealthy == 0).EndObject();
  if (context.json) PrintLine(json.text());
  if (unhealthy == 0) return kExitOk;
  std::fprintf(stderr, "stratactl: %zu of %zu shards are not serving\n",
               unhealthy, addresses.size());
  return kExitClusterError;
}

}  // namespace tools_internal
}  // namespace strata
