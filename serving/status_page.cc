#include "serving/status_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/html_page.h"
#include "common/replica_lag.h"

namespace strata {
namespace {

void AppendCharts(const std::vector<RateSample>& history, std::string* out) {
  constexpr char kBlue[] = "#1f77b4";
  constexpr char kRed[] = "#d62728";
  absl::StrAppend(
      out, "<h2>Last minutes</h2>",
      SvgLineChart(
          "chart-lookups", "Lookups per second", "/s",
          {{"lookups", kBlue, RateSeries(history, &RateSample::rates, 0)}}),
      SvgLineChart(
          "chart-keys", "Keys per second", "/s",
          {{"looked up", kBlue, RateSeries(history, &RateSample::rates, 1)},
           {"missing", kRed, RateSeries(history, &RateSample::rates, 2)}}),
      SvgLineChart(
          "chart-latency", "Lookup p99 latency", "ms",
          {{"Lookup", kBlue, RateSeries(history, &RateSample::p99s, 0, 1e3)}}),
      SvgLineChart(
          "chart-lag", "Largest lag behind a shard", "s",
          {{"lag", kRed, RateSeries(history, &RateSample::gauges, 0)}}));
}

void AppendShards(const v1::ServingStatusResponse& status, std::string* out) {
  absl::StrAppend(out,
                  "<h2>Training shards followed</h2><table id=\"shards\">"
                  "<tr><th>shard</th><th>address</th><th>state</th>"
                  "<th>applied</th><th>latest</th><th>behind</th>"
                  "<th>lag (s)</th><th>last error</th></tr>");
  for (const v1::FollowedShard& shard : status.shards()) {
    const uint64_t behind =
        shard.latest_sequence() >= shard.applied_sequence()
            ? shard.latest_sequence() - shard.applied_sequence()
            : 0;
    absl::StrAppendFormat(
        out,
        "<tr id=\"shard-%d\"><td>%d</td><td>%s</td>"
        "<td class=\"state %s\">%s</td><td class=\"applied\">%d</td>"
        "<td class=\"latest\">%d</td><td class=\"behind\">%d</td>"
        "<td class=\"lag\">%.3f</td><td>%s</td></tr>",
        shard.shard_index(), shard.shard_index(), HtmlEscape(shard.address()),
        shard.connected() ? "up" : "down",
        shard.connected() ? "connected" : "DISCONNECTED",
        shard.applied_sequence(), shard.latest_sequence(), behind,
        shard.lag_seconds(), HtmlEscape(shard.last_error()));
  }
  absl::StrAppend(out, "</table>");
}

// Replicated shards only: who is primary, in which term, and how far each
// follower replica is behind, as the primary last said on the stream.
void AppendReplicaGroups(const v1::ServingStatusResponse& status,
                         std::string* out) {
  bool any = false;
  for (const v1::FollowedShard& shard : status.shards()) {
    any = any || shard.has_replica_group();
  }
  if (!any) return;
  absl::StrAppend(out,
                  "<h2>Replica groups</h2><table id=\"groups\">"
                  "<tr><th>shard</th><th>mode</th><th>replicas</th>"
                  "<th>primary</th><th>term</th><th>lease</th>"
                  "<th>primary at</th><th>followers (lag)</th>"
                  "<th>streaming from</th><th>switches</th></tr>");
  for (const v1::FollowedShard& shard : status.shards()) {
    if (!shard.has_replica_group()) continue;
    const v1::ReplicaGroupInfo& group = shard.replica_group();
    std::string followers;
    for (const v1::FollowerInfo& follower : group.followers()) {
      absl::StrAppendFormat(&followers, "%s%s (%d)",
                            followers.empty() ? "" : ", ",
                            HtmlEscape(follower.replica_id()),
                            ReplicaLag(group.position_sequence(),
                                       follower.acknowledged_sequence()));
    }
    const std::string primary =
        group.primary() ? group.replica_id() : group.primary_id();
    absl::StrAppendFormat(
        out,
        "<tr id=\"group-%d\"><td>%d</td><td class=\"mode\">%s</td>"
        "<td class=\"replicas\">%d</td><td class=\"primary\">%s</td>"
        "<td class=\"term\">%d</td><td class=\"lease %s\">%s</td>"
        "<td class=\"position\">%d</td><td class=\"followers\">%s</td>"
        "<td class=\"streaming-from\">%s</td>"
        "<td class=\"switches\">%d</td></tr>",
        shard.shard_index(), shard.shard_index(), HtmlEscape(group.ack_mode()),
        group.replicas(), HtmlEscape(primary), group.term(),
        group.lease_valid() ? "up" : "down",
        group.lease_valid() ? "held" : "NOT RENEWED", group.position_sequence(),
        followers, HtmlEscape(shard.streaming_from()),
        shard.replica_switches());
  }
  absl::StrAppend(out, "</table>");
}

void AppendTables(const v1::ServingStatusResponse& status, std::string* out) {
  absl::StrAppend(out,
                  "<h2>Tables</h2><table id=\"tables\"><tr><th>table</th>"
                  "<th>dim</th><th>rows</th></tr>");
  for (const v1::TableInfo& table : status.tables()) {
    const std::string name = HtmlEscape(table.config().name());
    absl::StrAppendFormat(out,
                          "<tr id=\"table-%s\"><td>%s</td><td class=\"dim\">"
                          "%d</td><td class=\"rows\">%d</td></tr>",
                          name, name, table.config().dim(), table.num_rows());
  }
  absl::StrAppend(out, "</table>");
}

}  // namespace

std::string RenderStatusPage(const v1::ServingStatusResponse& status,
                             uint64_t keys_total, uint64_t missing_keys_total,
                             const std::vector<RateSample>& history,
                             int refresh_seconds) {
  size_t connected = 0;
  for (const v1::FollowedShard& shard : status.shards()) {
    if (shard.connected()) ++connected;
  }
  uint64_t rows = 0;
  for (const v1::TableInfo& table : status.tables()) rows += table.num_rows();
  std::string out = StatusPageHead("Strata serving PS", refresh_seconds);
  absl::StrAppendFormat(
      &out,
      "<h1>Strata serving PS</h1>"
      "<p id=\"summary\">mode <span id=\"mode\">%s</span>; "
      "<span id=\"shards-connected\">%d</span>/<span id=\"shards-total\">%d"
      "</span> shards connected; <span id=\"rows-total\">%d</span> rows in "
      "<span id=\"tables-total\">%d</span> tables; "
      "<span id=\"keys-total\">%d</span> keys looked up, "
      "<span id=\"missing-keys-total\">%d</span> without a row.</p>",
      HtmlEscape(status.mode()), connected, status.shards_size(), rows,
      status.tables_size(), keys_total, missing_keys_total);
  AppendCharts(history, &out);
  AppendShards(status, &out);
  AppendReplicaGroups(status, &out);
  AppendTables(status, &out);
  absl::StrAppend(&out, StatusPageFoot(refresh_seconds));
  return out;
}

}  // namespace strata
