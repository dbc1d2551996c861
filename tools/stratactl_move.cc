// stratactl move-buckets: moves buckets from the shards that own them to
// another shard while the cluster trains. Per step of at most
// --buckets_per_step buckets of one source: the target drops any rows of
// them left by an earlier attempt; the source begins tracking pushes to
// them; their rows (values and optimizer state) are copied; the keys pushed
// meanwhile are caught up; the source pauses writes to them for the last
// catch-up; the map gives them to the target (source first); writes resume
// (refused by the map now, so clients re-route); the source drops its copy.
// A failure before the map change ends the move at the source and drops the
// target's partial copy: the source keeps serving, and running the command
// again starts over. A failure after it is finished by running it again.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(int64_t, to_shard, -1, "move-buckets: the shard receiving them.");
ABSL_FLAG(int64_t, from_shard, -1,
          "move-buckets: with --count, take buckets of this shard.");
ABSL_FLAG(int64_t, count, 0,
          "move-buckets: how many of --from_shard's buckets to move (its "
          "highest numbered first).");
ABSL_FLAG(int64_t, buckets_per_step, 256,
          "move-buckets and reshard: buckets moved together (one copy, one "
          "write pause, one map version). Each step scans the source's "
          "tables once, so larger steps move rows faster; smaller ones hold "
          "fewer pushed keys to catch up in each pause.");
ABSL_FLAG(std::string, to_shards, "",
          "reshard: host:port of every shard the cluster keeps or gains, in "
          "shard order (the shards it keeps first, as in --shards).");
ABSL_FLAG(double, max_rows_per_second, 0,
          "move-buckets: copy at most this many rows per second (0: no "
          "limit), so that training keeps its throughput.");

namespace strata {
namespace tools_internal {
namespace {

// Rows per COPY and CATCH_UP answer.
constexpr uint32_t kRowsPerCall = 4096;
// Catch-up rounds before the pause while each still finds this many keys.
constexpr int kCatchUpRounds = 4;
constexpr uint64_t kCatchUpEnough = 256;

struct StepOutcome {
  uint64_t rows = 0;
  absl::Duration pause;
};

// Parses "7", "100-163" into bucket numbers.
absl::Status ParseBucketSpec(absl::string_view spec,
                             std::vector<uint32_t>& buckets) {
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    uint32_t first = 0, last = 0;
    if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends.back(), &last) || first > last ||
        last >= kNumBuckets) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", part, "' is not a bucket or range of buckets (0 to ",
          kNumBuckets - 1, ")"));
    }
    for (uint32_t b = first; b <= last; ++b) buckets.push_back(b);
  }
  return absl::OkStatus();
}

// The buckets the arguments and flags name, sorted and unique.
absl::StatusOr<std::vector<uint32_t>> ChosenBuckets(
    const CommandContext& context, const ShardMap& map) {
  std::vector<uint32_t> buckets;
  for (const std::string& arg : context.args) {
    STRATA_RETURN_IF_ERROR(ParseBucketSpec(arg, buckets));
  }
  const int64_t from = absl::GetFlag(FLAGS_from_shard);
  const int64_t count = absl::GetFlag(FLAGS_count);
  if (count > 0) {
    if (from < 0 || from >= map.num_shards()) {
      return absl::InvalidArgumentError(
          "--count needs --from_shard, one of the cluster's shards");
    }
    std::vector<uint32_t> owned = map.BucketsOf(static_cast<uint32_t>(from));
    const size_t take = std::min<size_t>(owned.size(), count);
    buckets.insert(buckets.end(), owned.end() - take, owned.end());
  }
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (buckets.empty()) {
    return absl::InvalidArgumentError(
        "name the buckets to move (e.g. 7 100-163) or --from_shard and "
        "--count");
  }
  return buckets;
}

class BucketMover {
 public:
  BucketMover(PsClient& client, uint32_t target)
      : client_(client), target_(target) {}

  // Moves `buckets`, all owned by `source`.
  absl::StatusOr<StepOutcome> MoveStep(const std::vector<uint32_t>& buckets,
                                       uint32_t source) {
    move_id_ = absl::StrCat("move-", absl::ToUnixNanos(Clock::Real()->Now()));
    buckets_ = buckets;
    StepOutcome outcome;
    absl::Status copied = CopyAndPause(source, outcome);
    if (copied.ok()) copied = GiveAway();
    if (!copied.ok()) {
      Abandon(source);
      return copied;
    }
    v1::MoveBucketsResponse ended;
    STRATA_RETURN_IF_ERROR(Call(source, v1::MoveBucketsRequest::END, &ended));
    outcome.pause = absl::Seconds(ended.paused_seconds());
    STRATA_RETURN_IF_ERROR(Drop(source));
    return outcome;
  }

  // Buckets the newest map gives the target already (a move whose map
  // change happened): every shard gets that map, and the others drop their
  // rows of them.
  absl::Status Finish(const std::vector<uint32_t>& buckets,
                      const ShardMap& map) {
    buckets_ = buckets;
    STRATA_RETURN_IF_ERROR(client_.SetShardMap(map));
    for (uint32_t s = 0; s < client_.num_shards(); ++s) {
      if (s != target_) STRATA_RETURN_IF_ERROR(Drop(s));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Call(uint32_t shard, v1::MoveBucketsRequest::Step step,
                    v1::MoveBucketsResponse* response,
                    v1::MoveBucketsRequest request = {}) {
    request.set_step(step);
    request.set_move_id(move_id_);
    request.mutable_buckets()->Add(buckets_.begin(), buckets_.end());
    request.set_target_shard(target_);
    if (absl::Status called = client_.MoveBuckets(shard, request, response);
        !called.ok()) {
      return absl::Status(
          called.code(),
          absl::StrCat(v1::MoveBucketsRequest::Step_Name(step), " on shard ",
                       shard, ": ", called.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Drop(uint32_t shard) {
    v1::MoveBucketsResponse response;
    return Call(shard, v1::MoveBucketsRequest::DROP, &response);
  }

  // Sends the rows of `from` to the target; returns how many.
  absl::StatusOr<uint64_t> Import(v1::MoveBucketsResponse& from) {
    v1::MoveBucketsRequest request;
    uint64_t rows = 0;
    for (v1::BucketRows& block : *from.mutable_rows()) {
      if (block.keys().empty() && block.absent_keys().empty()) continue;
      rows += static_cast<uint64_t>(block.keys_size());
      *request.add_rows() = std::move(block);
    }
    if (request.rows().empty()) return 0;
    v1::MoveBucketsResponse response;
    STRATA_RETURN_IF_ERROR(
        Call(target_, v1::MoveBucketsRequest::IMPORT, &response, request));
    return rows;
  }

  // Keeps the copy at --max_rows_per_second.
  void Throttle(uint64_t rows_so_far, absl::Time started) {
    const double rate = absl::GetFlag(FLAGS_max_rows_per_second);
    if (rate <= 0) return;
    const absl::Duration due =
        absl::Seconds(static_cast<double>(rows_so_far) / rate);
    const absl::Duration spent = Clock::Real()->Now() - started;
    if (due > spent) Clock::Real()->SleepFor(due - spent);
  }

  absl::Status CopyAndPause(uint32_t source, StepOutcome& outcome) {
    v1::MoveBucketsResponse response;
    STRATA_RETURN_IF_ERROR(Drop(target_));
    STRATA_RETURN_IF_ERROR(
        Call(source, v1::MoveBucketsRequest::BEGIN, &response));
    const absl::Time started = Clock::Real()->Now();
    for (const std::string& table : response.tables()) {
      v1::MoveBucketsRequest copy;
      copy.set_table(table);
      copy.set_max_rows(kRowsPerCall);
      do {
        v1::MoveBucketsResponse rows;
        STRATA_RETURN_IF_ERROR(
            Call(source, v1::MoveBucketsRequest::COPY, &rows, copy));
        STRATA_ASSIGN_OR_RETURN(uint64_t n, Import(rows));
        outcome.rows += n;
        Throttle(outcome.rows, started);
        *copy.mutable_cursor() = rows.cursor();
      } while (!copy.cursor().done());
    }
    v1::MoveBucketsRequest catch_up;
    catch_up.set_max_rows(kRowsPerCall);
    for (int round = 0; round < kCatchUpRounds; ++round) {
      v1::MoveBucketsResponse rows;
      STRATA_RETURN_IF_ERROR(
          Call(source, v1::MoveBucketsRequest::CATCH_UP, &rows, catch_up));
      STRATA_ASSIGN_OR_RETURN(uint64_t n, Import(rows));
      if (n + rows.pending_keys() < kCatchUpEnough) break;
    }
    // The pause: from here pushes to the buckets wait until END.
    catch_up.set_pause_writes(true);
    v1::MoveBucketsResponse rows;
    do {
      rows.Clear();
      STRATA_RETURN_IF_ERROR(
          Call(source, v1::MoveBucketsRequest::CATCH_UP, &rows, catch_up));
      STRATA_RETURN_IF_ERROR(Import(rows).status());
    } while (rows.pending_keys() > 0);
    return absl::OkStatus();
  }

  absl::Status GiveAway() {
    STRATA_RETURN_IF_ERROR(client_.RefreshShardMap());
    const ShardMap& current = *client_.shard_map();
    std::vector<uint32_t> owners = current.owners();
    for (uint32_t bucket : buckets_) owners[bucket] = target_;
    STRATA_ASSIGN_OR_RETURN(
        ShardMap next,
        ShardMap::Create(current.version() + 1, current.num_shards(), owners,
                         current.addresses()));
    return client_.SetShardMap(next);
  }

  // A step that failed before (or during) the map change.
  void Abandon(uint32_t source) {
    v1::MoveBucketsResponse ignored;
    (void)Call(source, v1::MoveBucketsRequest::END, &ignored);
    // Refused (and harmless) if the map gave the target the buckets.
    (void)Drop(target_);
  }

  PsClient& client_;
  const uint32_t target_;
  std::string move_id_;
  std::vector<uint32_t> buckets_;
};

std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(d));
}

struct MoveTotals {
  size_t buckets = 0;
  uint64_t rows = 0;
  std::vector<absl::Duration> pauses;
};

// Moves `buckets` to `target`, step by step per source; buckets the newest
// map gives the target already are finished (an earlier run stopped after
// its map change).
absl::Status MoveBucketsTo(PsClient& client,
                           const std::vector<uint32_t>& buckets,
                           uint32_t target, bool print, MoveTotals& totals) {
  const size_t per_step =
      static_cast<size_t>(absl::GetFlag(FLAGS_buckets_per_step));
  STRATA_RETURN_IF_ERROR(client.RefreshShardMap());
  // Every table on every shard (a shard added since a table was created
  // has not got it).
  STRATA_ASSIGN_OR_RETURN(std::vector<v1::TableInfo> tables,
                          client.ListTables());
  for (const v1::TableInfo& table : tables) {
    STRATA_RETURN_IF_ERROR(client.CreateTable(table.config()));
  }
  const ShardMap map = *client.shard_map();
  BucketMover mover(client, target);
  std::vector<uint32_t> finished;
  std::vector<std::vector<uint32_t>> by_source(map.num_shards());
  for (uint32_t bucket : buckets) {
    const uint32_t owner = map.OwnerOf(bucket);
    (owner == target ? finished : by_source[owner]).push_back(bucket);
  }
  if (!finished.empty()) STRATA_RETURN_IF_ERROR(mover.Finish(finished, map));
  for (uint32_t source = 0; source < by_source.size(); ++source) {
    const std::vector<uint32_t>& mine = by_source[source];
    for (size_t i = 0; i < mine.size(); i += per_step) {
      const std::vector<uint32_t> step(
          mine.begin() + i, mine.begin() + std::min(mine.size(), i + per_step));
      absl::StatusOr<StepOutcome> moved = mover.MoveStep(step, source);
      if (!moved.ok()) {
        return absl::Status(
            moved.status().code(),
            absl::StrCat("moving buckets ", step.front(), "..", step.back(),
                         " from shard ", source, " to shard ", target,
                         " failed (run the command again to go on): ",
                         moved.status().message()));
      }
      totals.buckets += step.size();
      totals.rows += moved->rows;
      totals.pauses.push_back(moved->pause);
      if (print) {
        PrintLine(absl::StrCat("moved ", step.size(), " buckets from shard ",
                               source, " to shard ", target, ": ", moved->rows,
                               " rows, writes paused ", Millis(moved->pause)));
      }
    }
  }
  return absl::OkStatus();
}

void PrintTotals(const CommandContext& context, MoveTotals& totals,
                 absl::Duration took) {
  std::vector<absl::Duration>& pauses = totals.pauses;
  std::sort(pauses.begin(), pauses.end());
  const absl::Duration p50 =
      pauses.empty() ? absl::ZeroDuration() : pauses[pauses.size() / 2];
  const absl::Duration max =
      pauses.empty() ? absl::ZeroDuration() : pauses.back();
  const ShardMap& map = *context.client->shard_map();
  if (context.json) {
    JsonWriter json;
    json.BeginObject();
    json.Key("buckets").Uint(totals.buckets);
    json.Key("rows").Uint(totals.rows);
    json.Key("seconds").Double(absl::ToDoubleSeconds(took));
    json.Key("steps").Uint(pauses.size());
    json.Key("pause_p50_ms").Double(absl::ToDoubleMilliseconds(p50));
    json.Key("pause_max_ms").Double(absl::ToDoubleMilliseconds(max));
    json.Key("num_shards").Uint(map.num_shards());
    json.Key("shard_map_version").Uint(map.version());
    json.EndObject();
    PrintLine(json.text());
    return;
  }
  PrintLine(absl::StrCat("moved ", totals.buckets, " buckets (", totals.rows,
                         " rows) in ",
                         absl::StrFormat("%.2f s", absl::ToDoubleSeconds(took)),
                         "; write pause p50 ", Millis(p50), ", max ",
                         Millis(max), "; ", map.Summary()));
}

// The owner of each bucket once `count` shards share them evenly, moving
// as few as possible: a shard keeps its buckets up to its share.
std::vector<uint32_t> BalancedOwners(const ShardMap& map, uint32_t count) {
  std::vector<size_t> share(count, kNumBuckets / count);
  for (uint32_t s = 0; s < kNumBuckets % count; ++s) ++share[s];
  std::vector<size_t> kept(count, 0);
  std::vector<uint32_t> owners = map.owners();
  std::vector<uint32_t> homeless;
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    const uint32_t owner = owners[b];
    if (owner < count && kept[owner] < share[owner]) {
      ++kept[owner];
    } else {
      homeless.push_back(b);
    }
  }
  uint32_t next = 0;
  for (uint32_t bucket : homeless) {
    while (kept[next] >= share[next]) ++next;
    owners[bucket] = next;
    ++kept[next];
  }
  return owners;
}

}  // namespace

int MoveBucketsCommand(const CommandContext& context) {
  PsClient& client = *context.client;
  if (absl::Status refreshed = client.RefreshShardMap(); !refreshed.ok()) {
    return ClusterError(refreshed);
  }
  const ShardMap map = *client.shard_map();
  const int64_t to = absl::GetFlag(FLAGS_to_shard);
  const int64_t per_step = absl::GetFlag(FLAGS_buckets_per_step);
  if (to < 0 || to >= map.num_shards()) {
    return UsageError(absl::StrCat("--to_shard must name one of the ",
                                   map.num_shards(), " shards"));
  }
  if (per_step < 1 || per_step > kNumBuckets) {
    return UsageError("--buckets_per_step must be 1 to 4096");
  }
  absl::StatusOr<std::vector<uint32_t>> buckets = ChosenBuckets(context, map);
  if (!buckets.ok()) return UsageError(buckets.status().message());
  const absl::Time started = Clock::Real()->Now();
  MoveTotals totals;
  if (absl::Status moved = MoveBucketsTo(
          client, *buckets, static_cast<uint32_t>(to), !context.json, totals);
      !moved.ok()) {
    return ClusterError(moved);
  }
  PrintTotals(context, totals, Clock::Real()->Now() - started);
  return kExitOk;
}

int ReshardCommand(const CommandContext& context) {
  PsClient& client = *context.client;
  const std::vector<std::string>& current =
      context.client_options.shard_addresses;
  const std::vector<std::string> wanted = absl::StrSplit(
      absl::GetFlag(FLAGS_to_shards), ',', absl::SkipWhitespace());
  if (wanted.empty()) {
    return UsageError(
        "--to_shards: host:port of every shard the cluster "
        "keeps or gains, in shard order");
  }
  if (absl::GetFlag(FLAGS_buckets_per_step) < 1 ||
      absl::GetFlag(FLAGS_buckets_per_step) > kNumBuckets) {
    return UsageError("--buckets_per_step must be 1 to 4096");
  }
  for (size_t s = 0; s < std::min(current.size(), wanted.size()); ++s) {
    if (current[s] != wanted[s]) {
      return UsageError(absl::StrCat(
          "--to_shards must keep the shards it keeps at their index: shard ", s,
          " is ", current[s], " in --shards but ", wanted[s],
          " in --to_shards (shards leave from the end)"));
    }
  }
  if (absl::Status refreshed = client.RefreshShardMap(); !refreshed.ok()) {
    return ClusterError(refreshed);
  }
  const absl::Time started = Clock::Real()->Now();
  const uint32_t count = static_cast<uint32_t>(wanted.size());
  // Growing: a map with the new shards (owning nothing yet) and every
  // shard's address, so that clients find them.
  if (count > client.shard_map()->num_shards()) {
    const ShardMap& map = *client.shard_map();
    absl::StatusOr<ShardMap> grown =
        ShardMap::Create(map.version() + 1, count, map.owners(), wanted);
    if (!grown.ok()) return UsageError(grown.status().message());
    if (absl::Status set = client.SetShardMap(*grown); !set.ok()) {
      return ClusterError(absl::Status(
          set.code(),
          absl::StrCat("adding shards: ", set.message(),
                       " (start every new shard with --num_shards=", count,
                       " and its --shard_index, then run this again)")));
    }
  }
  // Even shares over the shards kept.
  const std::vector<uint32_t> owners =
      BalancedOwners(*client.shard_map(), count);
  MoveTotals totals;
  for (uint32_t target = 0; target < count; ++target) {
    std::vector<uint32_t> buckets;
    for (uint32_t b = 0; b < kNumBuckets; ++b) {
      if (owners[b] == target && client.shard_map()->OwnerOf(b) != target) {
        buckets.push_back(b);
      }
    }
    if (buckets.empty()) continue;
    if (absl::Status moved =
            MoveBucketsTo(client, buckets, target, !context.json, totals);
        !moved.ok()) {
      return ClusterError(moved);
    }
  }
  // Shrinking: the shards past the new count own nothing now; the map
  // leaves them out (they can be stopped).
  if (count < client.shard_map()->num_shards()) {
    const ShardMap& map = *client.shard_map();
    absl::StatusOr<ShardMap> shrunk =
        ShardMap::Create(map.version() + 1, count, map.owners(), wanted);
    if (!shrunk.ok()) return ClusterError(shrunk.status());
    if (absl::Status set = client.SetShardMap(*shrunk); !set.ok()) {
      return ClusterError(set);
    }
  }
  PrintTotals(context, totals, Clock::Real()->Now() - started);
  return kExitOk;
}

}  // namespace tools_internal
}  // namespace strata
