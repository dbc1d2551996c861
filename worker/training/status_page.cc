#include "worker/training/status_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/html_page.h"

namespace strata {
namespace {

constexpr char kBlue[] = "#1f77b4";
constexpr char kRed[] = "#d62728";
constexpr char kGreen[] = "#2ca02c";

void AppendCharts(const std::vector<RateSample>& history, std::string* out) {
  absl::StrAppend(
      out, "<h2>Last minutes</h2>",
      SvgLineChart(
          "chart-samples", "Samples per second (all ranks)", "/s",
          {{"samples", kBlue, RateSeries(history, &RateSample::rates, 0)}}),
      SvgLineChart(
          "chart-steps", "Steps per second", "/s",
          {{"steps", kBlue, RateSeries(history, &RateSample::rates, 1)}}),
      SvgLineChart(
          "chart-loss", "Training loss (last progress interval)", "",
          {{"loss", kRed, RateSeries(history, &RateSample::gauges, 0)}}),
      SvgLineChart(
          "chart-auc", "Held-out AUC (last evaluation)", "",
          {{"AUC", kGreen, RateSeries(history, &RateSample::gauges, 1)}}));
}

}  // namespace

CounterReading WorkerReading(const TrainingSnapshot& now) {
  CounterReading reading;
  reading.counters = {static_cast<uint64_t>(now.global_examples),
                      static_cast<uint64_t>(now.step)};
  reading.gauges = {now.loss, now.evaluated ? now.eval_auc : 0.0};
  return reading;
}

std::string RenderWorkerStatusPage(const WorkerIdentity& identity,
                                   const TrainingSnapshot& now,
                                   const std::vector<RateSample>& history,
                                   int refresh_seconds) {
  const std::string title = absl::StrCat("Strata worker, rank ", identity.rank);
  std::string out = StatusPageHead(title, refresh_seconds);
  absl::StrAppendFormat(
      &out,
      "<h1>%s</h1><p id=\"summary\">rank <span id=\"rank\">%d</span> of "
      "<span id=\"num-workers\">%d</span> on <span id=\"device\">%s</span>, "
      "<span id=\"num-shards\">%d</span> shards; %s</p>",
      HtmlEscape(title), identity.rank, identity.num_workers,
      HtmlEscape(identity.device), identity.num_shards,
      HtmlEscape(identity.model));
  AppendCharts(history, &out);
  absl::StrAppendFormat(
      &out,
      "<h2>Progress</h2><table id=\"progress\">"
      "<tr><th>global step</th><td id=\"step\">%d</td></tr>"
      "<tr><th>examples (this rank)</th><td id=\"examples\">%d</td></tr>"
      "<tr><th>examples (all ranks)</th><td id=\"job-examples\">%d</td></tr>"
      "<tr><th>loss</th><td id=\"loss\">%.5f</td></tr>"
      "<tr><th>samples/s</th><td id=\"samples-per-second\">%.0f</td></tr>"
      "<tr><th>row gradients pushed</th><td id=\"pushed-keys\">%d</td></tr>"
      "<tr><th>malformed lines skipped</th><td id=\"malformed-lines\">%d"
      "</td></tr>"
      "<tr><th>held-out AUC</th><td id=\"eval-auc\">%s</td></tr>"
      "<tr><th>held-out log loss</th><td id=\"eval-log-loss\">%s</td></tr>"
      "</table>",
      now.step, now.rank_examples, now.global_examples, now.loss,
      now.samples_per_second, now.pushed_keys, now.malformed_lines,
      now.evaluated ? absl::StrFormat("%.5f", now.eval_auc) : "not yet",
      now.evaluated ? absl::StrFormat("%.5f", now.eval_log_loss) : "not yet");
  absl::StrAppend(&out, StatusPageFoot(refresh_seconds));
  return out;
}

}  // namespace strata
