#include "server/status_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/html_page.h"
#include "common/metrics.h"
#include "common/replica_lag.h"

namespace strata {
namespace {

std::vector<double> Column(const std::vector<TrafficSample>& history,
                           double TrafficSample::*field, double scale = 1) {
  std::vector<double> values;
  values.reserve(history.size());
  for (const TrafficSample& sample : history) {
    values.push_back(sample.*field * scale);
  }
  return values;
}

void AppendCharts(const std::vector<TrafficSample>& history, std::string* out) {
  constexpr char kPull[] = "#1f77b4";
  constexpr char kPush[] = "#d62728";
  absl::StrAppend(
      out, "<h2>Last minutes</h2>",
      SvgLineChart(
          "chart-requests", "Requests per second", "/s",
          {{"Pull", kPull, Column(history, &TrafficSample::pulls_per_second)},
           {"Push", kPush,
            Column(history, &TrafficSample::pushes_per_second)}}),
      SvgLineChart("chart-keys", "Keys per second", "/s",
                   {{"pulled", kPull,
                     Column(history, &TrafficSample::keys_pulled_per_second)},
                    {"pushed", kPush,
                     Column(history, &TrafficSample::keys_pushed_per_second)}}),
      SvgLineChart("chart-latency", "p99 latency", "ms",
                   {{"Pull", kPull,
                     Column(history, &TrafficSample::pull_p99_seconds, 1e3)},
                    {"Push", kPush,
                     Column(history, &TrafficSample::push_p99_seconds, 1e3)}}));
}

void AppendTables(const std::vector<TableStats>& tables, std::string* out) {
  absl::StrAppend(out,
                  "<h2>Tables</h2><table id=\"tables\"><tr><th>table</th>"
                  "<th>dim</th><th>optimizer</th><th>rows</th>"
                  "<th>in memory</th><th>memory (bytes)</th>"
                  "<th>admitted</th><th>rejected gradients</th>"
                  "<th>evicted</th></tr>");
  for (const TableStats& t : tables) {
    const std::string name = HtmlEscape(t.config.name);
    absl::StrAppendFormat(
        out,
        "<tr id=\"table-%s\"><td>%s</td><td class=\"dim\">%d</td>"
        "<td class=\"optimizer\">%s</td><td class=\"rows\">%d</td>"
        "<td class=\"in-memory\">%d</td><td class=\"memory\">%d</td>"
        "<td class=\"admitted\">%d</td><td class=\"rejected\">%d</td>"
        "<td class=\"evicted\">%d</td></tr>",
        name, name, t.config.dim,
        HtmlEscape(std::string(OptimizerName(t.config.optimizer.type))),
        t.num_rows, t.rows_in_memory, t.memory_bytes, t.admitted_keys,
        t.rejected_gradients, t.evicted_rows);
  }
  absl::StrAppend(out, "</table>");
}

void AppendRequests(const RequestMetrics& metrics, std::string* out) {
  absl::StrAppend(out,
                  "<h2>Requests since the start</h2><table id=\"requests\">"
                  "<tr><th>method</th><th>calls</th><th>p50 (ms)</th>"
                  "<th>p99 (ms)</th></tr>");
  for (size_t m = 0; m < static_cast<size_t>(ShardMethod::kCount); ++m) {
    const ShardMethod method = static_cast<ShardMethod>(m);
    const AtomicHistogram& latency = metrics.latency(method);
    const std::vector<uint64_t> counts = latency.Counts();
    absl::StrAppendFormat(
        out,
        "<tr id=\"method-%s\"><td>%s</td><td class=\"calls\">%d</td>"
        "<td class=\"p50\">%.3f</td><td class=\"p99\">%.3f</td></tr>",
        RequestMetrics::MethodName(method), RequestMetrics::MethodName(method),
        metrics.requests(method),
        1e3 * HistogramQuantile(latency.bounds(), counts, 0.5),
        1e3 * HistogramQuantile(latency.bounds(), counts, 0.99));
  }
  absl::StrAppendFormat(
      out,
      "</table><p>Failed requests: <span id=\"failed-total\">%d</span>; "
      "keys pulled <span id=\"keys-pulled\">%d</span>, pushed "
      "<span id=\"keys-pushed\">%d</span>; duplicate pushes "
      "<span id=\"duplicate-pushes\">%d</span>.</p>",
      metrics.failed_requests(), metrics.keys_pulled(), metrics.keys_pushed(),
      metrics.duplicate_pushes());
}

void AppendStore(const StorageStats& storage, std::string* out) {
  absl::StrAppendFormat(
      out,
      "<h2>Store</h2><table id=\"store\"><tr><th>memtables (bytes)</th>"
      "<th>compaction backlog (bytes)</th><th>SST (bytes)</th>"
      "<th>block cache (bytes)</th><th>unwritten rows</th>"
      "<th>failed writes</th><th>last write error</th></tr>"
      "<tr><td>%d</td><td>%d</td><td>%d</td><td>%d</td>"
      "<td id=\"unwritten-rows\">%d</td><td id=\"failed-writes\">%d</td>"
      "<td class=\"%s\">%s</td></tr></table>",
      storage.memtable_bytes, storage.pending_compaction_bytes,
      storage.sst_bytes, storage.block_cache_bytes, storage.unwritten_rows,
      storage.failed_writes, storage.write_error.empty() ? "up" : "down",
      storage.write_error.empty() ? "none" : HtmlEscape(storage.write_error));
}

void AppendReplication(const ReplicaGroupStatus& group, std::string* out) {
  std::string followers;
  for (const auto& [follower, sequence] : group.follower_sequences) {
    absl::StrAppendFormat(&followers, "%s%s (%d behind)",
                          followers.empty() ? "" : ", ", HtmlEscape(follower),
                          ReplicaLag(group.position.sequence, sequence));
  }
  absl::StrAppendFormat(
      out,
      "<h2>Replica group</h2><table id=\"replication\"><tr><th>replica</th>"
      "<th>role</th><th>primary</th><th>term</th><th>lease</th>"
      "<th>applied</th><th>followers</th><th>promotions</th></tr>"
      "<tr><td>%s</td><td id=\"role\">%s</td><td>%s</td><td>%d</td>"
      "<td class=\"%s\">%s</td><td>%d</td><td>%s</td><td>%d</td></tr>"
      "</table>",
      HtmlEscape(group.replica_id), group.primary ? "primary" : "follower",
      HtmlEscape(group.primary ? group.replica_id : group.primary_id),
      group.term, group.lease_valid ? "up" : "down",
      group.lease_valid ? "held" : "NOT RENEWED", group.position.sequence,
      followers.empty() ? "-" : followers, group.failovers);
}

}  // namespace

std::string RenderShardStatusPage(const ShardStatusView& view,
                                  int refresh_seconds) {
  uint64_t rows = 0;
  for (const TableStats& t : view.tables) rows += t.num_rows;
  std::string out = StatusPageHead(
      absl::StrCat("Strata shard ", view.shard_index, " of ", view.num_shards),
      refresh_seconds);
  absl::StrAppendFormat(
      &out,
      "<h1>Strata training shard <span id=\"shard-index\">%d</span> of "
      "<span id=\"num-shards\">%d</span></h1>"
      "<p id=\"summary\"><span id=\"rows-total\">%d</span> rows in "
      "<span id=\"tables-total\">%d</span> tables; durability "
      "<span id=\"durability\">%s</span>.</p>",
      view.shard_index, view.num_shards, rows, view.tables.size(),
      HtmlEscape(view.durability));
  AppendCharts(view.history, &out);
  AppendTables(view.tables, &out);
  if (view.metrics != nullptr) AppendRequests(*view.metrics, &out);
  AppendStore(view.storage, &out);
  if (view.replication != nullptr) AppendReplication(*view.replication, &out);
  absl::StrAppend(&out, StatusPageFoot(refresh_seconds));
  return out;
}

}  // namespace strata
