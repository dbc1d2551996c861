// stratactl status: one screen on the whole cluster. Each shard is asked for
// its stats twice, --interval_s apart; the difference gives
// requests and keys per second. With --serving, the serving PS reports how
// far it trails each shard's change stream.

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/serving_client.h"
#include "common/replica_lag.h"
#include "proto/strata.pb.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(std::string, serving, "",
          "status: host:port of a serving PS to report on as well.");
ABSL_FLAG(double, interval_s, 1.0,
          "status: seconds between the two stats samples that rates come "
          "from.");

namespace strata {
namespace tools_internal {
namespace {

struct ShardSample {
  absl::Status status;
  v1::StatsResponse stats;
  absl::Time at;
};

struct ShardStatus {
  std::string address;
  absl::Status status;  // of the second sample
  uint64_t rows = 0;
  uint64_t memory_bytes = 0;
  size_t tables = 0;
  double pulls_per_second = 0;
  double pushes_per_second = 0;
  double keys_pulled_per_second = 0;
  double keys_pushed_per_second = 0;
  uint64_t failed_requests = 0;
  // A replicated shard: what its primary reports.
  bool replicated = false;
  v1::ReplicaGroupInfo replication;
};

// One single-shard client per shard, made once and asked twice, so that a
// shard that is down is named without hiding the others.
using ShardClients = std::vector<absl::StatusOr<std::unique_ptr<PsClient>>>;

ShardClients ConnectShards(const CommandContext& context) {
  ShardClients clients;
  for (const std::string& address : context.client_options.shard_addresses) {
    PsClientOptions options = context.client_options;
    options.shard_addresses = {address};
    options.retry_deadline = absl::ZeroDuration();
    clients.push_back(PsClient::Create(options));
  }
  return clients;
}

// Stats of every shard at once.
std::vector<ShardSample> SampleShards(const ShardClients& clients) {
  std::vector<ShardSample> samples(clients.size());
  std::vector<std::thread> threads;
  for (size_t s = 0; s < clients.size(); ++s) {
    threads.emplace_back([&clients, &samples, s] {
      if (!clients[s].ok()) {
        samples[s].status = clients[s].status();
        samples[s].at = absl::Now();
        return;
      }
      auto stats = (*clients[s])->Stats();
      samples[s].at = absl::Now();
      if (!stats.ok()) {
        samples[s].status = stats.status();
      } else {
        samples[s].stats = stats->at(0);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return samples;
}

double Rate(uint64_t before, uint64_t after, double seconds) {
  return seconds > 0 && after >= before ? (after - before) / seconds : 0;
}

ShardStatus Summarize(const std::string& address, const ShardSample& first,
                      const ShardSample& second) {
  ShardStatus shard;
  shard.address = address;
  shard.status = second.status;
  if (!second.status.ok()) return shard;
  const v1::StatsResponse& now = second.stats;
  for (const v1::TableInfo& table : now.tables()) {
    shard.rows += table.num_rows();
    shard.memory_bytes += table.memory_bytes();
  }
  shard.tables = now.tables_size();
  shard.failed_requests = now.failed_requests();
  shard.replicated = now.has_replication();
  shard.replication = now.replication();
  if (!first.status.ok()) return shard;
  const v1::StatsResponse& then = first.stats;
  const double seconds = absl::ToDoubleSeconds(second.at - first.at);
  shard.pulls_per_second =
      Rate(then.pull_requests(), now.pull_requests(), seconds);
  shard.pushes_per_second =
      Rate(then.push_requests(), now.push_requests(), seconds);
  shard.keys_pulled_per_second =
      Rate(then.keys_pulled(), now.keys_pulled(), seconds);
  shard.keys_pushed_per_second =
      Rate(then.keys_pushed(), now.keys_pushed(), seconds);
  return shard;
}

absl::StatusOr<v1::ServingStatusResponse> ServingStatus(
    const CommandContext& context, const std::string& address) {
  ServingClientOptions options;
  options.endpoints = {address};
  options.retry_deadline = absl::ZeroDuration();
  options.tls_ca_file = context.client_options.tls_ca_file;
  options.tls_client_cert_file = context.client_options.tls_client_cert_file;
  options.tls_client_key_file = context.client_options.tls_client_key_file;
  options.auth_token = context.client_options.auth_token;
  auto client = ServingClient::Create(options);
  if (!client.ok()) return client.status();
  return (*client)->Status();
}

// "  replicas (replicated, 3): primary r1 term 7 at 313 (lease ok, 1
// failover); follower r0 at 313 (lag 0); follower r2 at 311 (lag 2)".
void PrintReplicas(const v1::ReplicaGroupInfo& info) {
  std::string line = absl::StrFormat(
      "  replicas (%s, %d): primary %s term %d at %d (lease %s, %d "
      "failovers here)",
      info.ack_mode(), info.replicas(),
      info.primary() ? info.replica_id() : info.primary_id(), info.term(),
      info.position_sequence(), info.lease_valid() ? "ok" : "NOT RENEWED",
      info.failovers());
  if (!info.primary()) {
    absl::StrAppend(&line, "; answered by follower ", info.replica_id());
  }
  for (const v1::FollowerInfo& follower : info.followers()) {
    const uint64_t at = follower.acknowledged_sequence();
    absl::StrAppend(&line, "; follower ", follower.replica_id(), " at ", at,
                    " (lag ", ReplicaLag(info.position_sequence(), at), ")");
  }
  PrintLine(line);
}

void PrintText(
    const std::vector<ShardStatus>& shards, const std::string& serving_address,
    const std::optional<absl::StatusOr<v1::ServingStatusResponse>>& serving) {
  size_t up = 0;
  uint64_t rows = 0, memory = 0;
  double pulls = 0, pushes = 0;
  for (const ShardStatus& shard : shards) {
    if (!shard.status.ok()) continue;
    ++up;
    rows += shard.rows;
    memory += shard.memory_bytes;
    pulls += shard.pulls_per_second;
    pushes += shard.pushes_per_second;
  }
  PrintLine(absl::StrFormat(
      "cluster: %d/%d shards up, %d rows, %s, %.1f pulls/s, %.1f pushes/s", up,
      shards.size(), rows, HumanBytes(memory), pulls, pushes));
  for (size_t s = 0; s < shards.size(); ++s) {
    const ShardStatus& shard = shards[s];
    if (!shard.status.ok()) {
      PrintLine(absl::StrCat("shard ", s, " ", shard.address, " DOWN: ",
                             absl::StatusCodeToString(shard.status.code()),
                             ": ", shard.status.message()));
      continue;
    }
    PrintLine(absl::StrFormat(
        "shard %d %s UP tables=%d rows=%d memory=%s pulls/s=%.1f "
        "pushes/s=%.1f keys_pulled/s=%.0f keys_pushed/s=%.0f failed=%d",
        s, shard.address, shard.tables, shard.rows,
        HumanBytes(shard.memory_bytes), shard.pulls_per_second,
        shard.pushes_per_second, shard.keys_pulled_per_second,
        shard.keys_pushed_per_second, shard.failed_requests));
    if (shard.replicated) PrintReplicas(shard.replication);
  }
  if (!serving.has_value()) return;
  if (!serving->ok()) {
    PrintLine(absl::StrCat("serving ", serving_address, " DOWN: ",
                           absl::StatusCodeToString(serving->status().code()),
                           ": ", serving->status().message()));
    return;
  }
  PrintLine(absl::StrCat("serving ", serving_address,
                         " UP mode=", (*serving)->mode()));
  for (const v1::FollowedShard& followed : (*serving)->shards()) {
    PrintLine(absl::StrFormat(
        "  follows shard %d %s: %s, %d updates behind, lag %.3f s%s",
        followed.shard_index(), followed.address(),
        followed.connected() ? "connected" : "DISCONNECTED",
        followed.latest_sequence() - followed.applied_sequence(),
        followed.lag_seconds(),
        followed.last_error().empty()
            ? ""
            : absl::StrCat(" (", followed.last_error(), ")")));
  }
}

void PrintJson(
    const std::vector<ShardStatus>& shards, const std::string& serving_address,
    const std::optional<absl::StatusOr<v1::ServingStatusResponse>>& serving) {
  JsonWriter json;
  json.BeginObject().Key("shards").BeginArray();
  for (const ShardStatus& shard : shards) {
    json.BeginObject();
    json.Key("address").String(shard.address);
    json.Key("up").Bool(shard.status.ok());
    if (!shard.status.ok()) {
      json.Key("error").String(shard.status.ToString());
    } else {
      json.Key("tables").Uint(shard.tables);
      json.Key("rows").Uint(shard.rows);
      json.Key("memory_bytes").Uint(shard.memory_bytes);
      json.Key("pulls_per_second").Double(shard.pulls_per_second);
      json.Key("pushes_per_second").Double(shard.pushes_per_second);
      json.Key("keys_pulled_per_second").Double(shard.keys_pulled_per_second);
      json.Key("keys_pushed_per_second").Double(shard.keys_pushed_per_second);
      json.Key("failed_requests").Uint(shard.failed_requests);
      if (shard.replicated) {
        const v1::ReplicaGroupInfo& info = shard.replication;
        json.Key("replication").BeginObject();
        json.Key("mode").String(info.ack_mode());
        json.Key("replicas").Uint(info.replicas());
        json.Key("primary").String(info.primary() ? info.replica_id()
                                                  : info.primary_id());
        // A follower answers when the primary cannot (during a failover).
        json.Key("answered_by").String(info.replica_id());
        json.Key("answered_by_primary").Bool(info.primary());
        json.Key("term").Uint(info.term());
        json.Key("sequence").Uint(info.position_sequence());
        json.Key("lease_valid").Bool(info.lease_valid());
        json.Key("failovers").Uint(info.failovers());
        json.Key("followers").BeginArray();
        for (const v1::FollowerInfo& follower : info.followers()) {
          json.BeginObject();
          json.Key("replica_id").String(follower.replica_id());
          json.Key("acknowledged_sequence")
              .Uint(follower.acknowledged_sequence());
          json.EndObject();
        }
        json.EndArray();
        json.EndObject();
      }
    }
    json.EndObject();
  }
  json.EndArray();
  if (serving.has_value()) {
    json.Key("serving").BeginObject();
    json.Key("address").String(serving_address);
    json.Key("up").Bool(serving->ok());
    if (!serving->ok()) {
      json.Key("error").String(serving->status().ToString());
    } else {
      json.Key("mode").String((*serving)->mode());
      json.Key("shards").BeginArray();
      for (const v1::FollowedShard& followed : (*serving)->shards()) {
        json.BeginObject();
        json.Key("shard_index").Uint(followed.shard_index());
        json.Key("connected").Bool(followed.connected());
        json.Key("updates_behind")
            .Uint(followed.latest_sequence() - followed.applied_sequence());
        json.Key("lag_seconds").Double(followed.lag_seconds());
        json.EndObject();
      }
      json.EndArray();
    }
    json.EndObject();
  }
  json.EndObject();
  PrintLine(json.text());
}

}  // namespace

int StatusCommand(const CommandContext& context) {
  const double interval = absl::GetFlag(FLAGS_interval_s);
  if (!(interval >= 0 && interval <= 600)) {
    return UsageError("--interval_s must be in 0..600");
  }
  const ShardClients clients = ConnectShards(context);
  const std::vector<ShardSample> first = SampleShards(clients);
  // The sampling interval that rates are measured over.
  absl::SleepFor(absl::Seconds(interval));
  const std::vector<ShardSample> second = SampleShards(clients);
  std::vector<ShardStatus> shards;
  bool healthy = true;
  for (size_t s = 0; s < first.size(); ++s) {
    shards.push_back(Summarize(ShardAddress(context, s), first[s], second[s]));
    healthy = healthy && shards.back().status.ok();
  }
  const std::string serving_address = absl::GetFlag(FLAGS_serving);
  std::optional<absl::StatusOr<v1::ServingStatusResponse>> serving;
  if (!serving_address.empty()) {
    serving = ServingStatus(context, serving_address);
    healthy = healthy && serving->ok();
    if (serving->ok()) {
      for (const v1::FollowedShard& followed : (*serving)->shards()) {
        healthy = healthy && followed.connected();
      }
    }
  }
  if (context.json) {
    PrintJson(shards, serving_address, serving);
  } else {
    PrintText(shards, serving_address, serving);
  }
  return healthy ? kExitOk : kExitClusterError;
}

}  // namespace tools_internal
}  // namespace strata
