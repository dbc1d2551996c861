// strata-lookup: looks rows up on a strata-serving and prints them as
// `stratactl pull` does, optionally after waiting until it has caught up
// with every training shard.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/serving_client.h"
#include "common/client_flags.h"
#include "common/command_line.h"
#include "proto/strata.pb.h"

ABSL_FLAG(std::string, serving, "",
          "host:port of strata-serving; a comma-separated list spreads the "
          "lookups over replicas (required).");
ABSL_FLAG(double, wait_caught_up_s, 0,
          "First wait up to this many seconds until every followed shard is "
          "connected and applied up to its latest sequence; 0 does not wait.");
ABSL_FLAG(int, timeout_ms, 5000, "Deadline of each call.");

namespace strata {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntimeError = 1;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-lookup: %s (see --help)\n", message.c_str());
  return kUsageExitCode;
}

int Failure(const absl::Status& status) {
  std::fprintf(stderr, "strata-lookup: %s\n", status.ToString().c_str());
  return kExitRuntimeError;
}

bool CaughtUp(const v1::ServingStatusResponse& status) {
  for (const v1::FollowedShard& shard : status.shards()) {
    if (status.mode() == "follow" &&
        (!shard.connected() ||
         shard.applied_sequence() < shard.latest_sequence())) {
      return false;
    }
  }
  return true;
}

// Polls Status until every shard is caught up. DEADLINE_EXCEEDED, naming
// the shards behind, otherwise.
absl::StatusOr<v1::ServingStatusResponse> WaitUntilCaughtUp(
    ServingClient& client, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::ServingStatusResponse> status = client.Status();
    if (!status.ok()) return status.status();
    if (CaughtUp(*status)) return status;
    if (absl::Now() > give_up) {
      std::string behind;
      for (const v1::FollowedShard& shard : status->shards()) {
        absl::StrAppend(&behind, " shard ", shard.shard_index(), " (",
                        shard.address(), "): connected=", shard.connected(),
                        " applied=", shard.applied_sequence(),
                        " latest=", shard.latest_sequence(),
                        shard.last_error().empty() ? "" : " last_error=",
                        shard.last_error(), ";");
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "not caught up within ", absl::FormatDuration(timeout), ":", behind));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

int Run(const std::vector<std::string>& args) {
  if (args.size() != 3) {
    return UsageError("usage: strata-lookup --serving=HOST:PORT TABLE KEY,...");
  }
  ServingClientOptions options;
  options.endpoints =
      absl::StrSplit(absl::GetFlag(FLAGS_serving), ',', absl::SkipWhitespace());
  if (options.endpoints.empty()) return UsageError("--serving is required");
  if (absl::GetFlag(FLAGS_timeout_ms) < 1) {
    return UsageError("--timeout_ms must be >= 1");
  }
  options.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  absl::StatusOr<ClientSecurity> security = ClientSecurityFromFlags();
  if (!security.ok()) {
    return UsageError(std::string(security.status().message()));
  }
  options.tls_ca_file = security->tls_ca_file;
  options.tls_client_cert_file = security->tls_client_cert_file;
  options.tls_client_key_file = security->tls_client_key_file;
  options.auth_token = security->auth_token;
  const double wait_s = absl::GetFlag(FLAGS_wait_caught_up_s);
  if (wait_s < 0) return UsageError("--wait_caught_up_s must be >= 0");
  const std::string& table = args[1];
  std::vector<uint64_t> keys;
  for (absl::string_view piece :
       absl::StrSplit(args[2], ',', absl::SkipWhitespace())) {
    uint64_t key = 0;
    if (!absl::SimpleAtoi(piece, &key)) {
      return UsageError(absl::StrCat("'", piece, "' is not a key"));
    }
    keys.push_back(key);
  }
  if (keys.empty()) return UsageError("no keys");

  absl::StatusOr<std::unique_ptr<ServingClient>> client =
      ServingClient::Create(options);
  if (!client.ok()) return Failure(client.status());
  absl::StatusOr<v1::ServingStatusResponse> status =
      wait_s > 0 ? WaitUntilCaughtUp(**client, absl::Seconds(wait_s))
                 : (*client)->Status();
  if (!status.ok()) return Failure(status.status());
  uint32_t dim = 0;
  for (const v1::TableInfo& info : status->tables()) {
    if (info.config().name() == table) dim = info.config().dim();
  }
  if (dim == 0) {
    return Failure(
        absl::NotFoundError(absl::StrCat("table '", table, "' is not served")));
  }
  std::vector<float> rows(keys.size() * dim);
  const absl::Status looked_up =
      (*client)->Lookup(table, keys, absl::MakeSpan(rows));
  if (!looked_up.ok()) return Failure(looked_up);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string line = absl::StrCat(keys[i], "\t");
    for (uint32_t d = 0; d < dim; ++d) {
      absl::StrAppend(&line, d == 0 ? "" : " ", rows[i * dim + d]);
    }
    std::printf("%s\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  const std::vector<std::string> args = strata::ParseCommandLine(
      "Looks rows up on a strata-serving and prints them, one row a line: "
      "KEY<TAB>values.\n"
      "Example: strata-lookup --serving=127.0.0.1:50061 --wait_caught_up_s=30 "
      "ads 11,22,33",
      argc, argv);
  return strata::Run(args);
}
