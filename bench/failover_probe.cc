// strata-failover-probe: pushes one small batch after another to a
// (replicated) cluster through PsClient for --duration_s, and prints the
// gaps between consecutive acknowledged pushes longer than --gap_ms as JSON:
// how long writes were unavailable each time a primary was killed.
//
// Example: strata-failover-probe --shards='a:1|b:2|c:3' --duration_s=60

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/command_line.h"
#include "proto/strata.pb.h"
#include "tools/json_writer.h"

ABSL_FLAG(std::string, shards, "",
          "Comma-separated shards; a replicated one is its replicas joined "
          "by '|'.");
ABSL_FLAG(double, duration_s, 30, "How long to push.");
ABSL_FLAG(int64_t, gap_ms, 100, "Gaps longer than this are reported.");
ABSL_FLAG(std::string, table, "probe", "Table (created: dim 4, SGD).");

namespace strata {
namespace {

int Run() {
  PsClientOptions options;
  options.shard_addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_shards), ',', absl::SkipEmpty());
  options.retry_deadline = absl::Seconds(60);
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(100);
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "strata-failover-probe: %s\n",
                 client.status().ToString().c_str());
    return 2;
  }
  const std::string table = absl::GetFlag(FLAGS_table);
  v1::TableConfig config;
  config.set_name(table);
  config.set_dim(4);
  config.mutable_optimizer()->set_type(v1::SGD);
  if (absl::Status s = (*client)->CreateTable(config); !s.ok()) {
    std::fprintf(stderr, "strata-failover-probe: %s\n", s.ToString().c_str());
    return 1;
  }
  const absl::Duration gap = absl::Milliseconds(absl::GetFlag(FLAGS_gap_ms));
  const absl::Time end =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  std::vector<double> gaps_ms;
  uint64_t pushes = 0, failures = 0;
  std::vector<uint64_t> keys(64);
  std::vector<float> gradients(keys.size() * 4, 0.01f);
  absl::Time last = absl::Now();
  for (uint64_t i = 0; absl::Now() < end; ++i) {
    for (size_t k = 0; k < keys.size(); ++k) keys[k] = i * keys.size() + k;
    if (!(*client)->Push(table, keys, gradients).ok()) {
      ++failures;
      continue;
    }
    const absl::Time now = absl::Now();
    if (now - last > gap)
      gaps_ms.push_back(absl::ToDoubleMilliseconds(now - last));
    last = now;
    ++pushes;
  }
  JsonWriter json;
  json.BeginObject();
  json.Key("pushes").Uint(pushes);
  json.Key("failures").Uint(failures);
  json.Key("gaps_ms").BeginArray();
  for (double g : gaps_ms) json.Double(g);
  json.EndArray();
  json.EndObject();
  std::printf("%s\n", json.text().c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::ParseCommandLine(
      "Pushes continuously and reports the gaps between acknowledged pushes "
      "(write unavailability during failovers).",
      argc, argv);
  return strata::Run();
}
