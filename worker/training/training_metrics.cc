#include "worker/training/training_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {
namespace {

void AppendMetric(std::string* out, const char* name, const char* type,
                  const char* help, double value) {
  absl::StrAppendFormat(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name,
                        help, name, type, name, value);
}

}  // namespace

void TrainingMetrics::RecordStep(int64_t step, int64_t rank_examples,
                                 int64_t global_examples) {
  absl::MutexLock lock(&mu_);
  step_ = step;
  rank_examples_ += rank_examples;
  global_examples_ += global_examples;
}

void TrainingMetrics::RecordProgress(double loss, double samples_per_second) {
  absl::MutexLock lock(&mu_);
  loss_ = loss;
  samples_per_second_ = samples_per_second;
}

void TrainingMetrics::RecordEval(double auc, double log_loss) {
  absl::MutexLock lock(&mu_);
  evaluated_ = true;
  eval_auc_ = auc;
  eval_log_loss_ = log_loss;
}

void TrainingMetrics::RecordPushedKeys(int64_t total) {
  absl::MutexLock lock(&mu_);
  pushed_keys_ = total;
}

void TrainingMetrics::RecordMalformedLines(int64_t total) {
  absl::MutexLock lock(&mu_);
  malformed_lines_ = total;
}

std::string TrainingMetrics::PrometheusText() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  AppendMetric(&out, "strata_worker_global_step", "gauge",
               "Steps taken by the job (restored steps included).", step_);
  AppendMetric(&out, "strata_worker_examples_total", "counter",
               "Examples this rank trained on.", rank_examples_);
  AppendMetric(&out, "strata_worker_job_examples_total", "counter",
               "Examples all ranks trained on, as this rank counted them.",
               global_examples_);
  AppendMetric(&out, "strata_worker_loss", "gauge",
               "Mean cross-entropy over the last progress interval, all "
               "ranks.",
               loss_);
  AppendMetric(&out, "strata_worker_samples_per_second", "gauge",
               "Examples per second over the last progress interval, all "
               "ranks.",
               samples_per_second_);
  AppendMetric(&out, "strata_worker_pushed_keys_total", "counter",
               "Row gradients this rank's pushes delivered.", pushed_keys_);
  AppendMetric(&out, "strata_worker_malformed_lines_total", "counter",
               "Input lines of this rank skipped as malformed.",
               malformed_lines_);
  if (evaluated_) {
    AppendMetric(&out, "strata_worker_eval_auc", "gauge",
                 "Held-out AUC of the last evaluation.", eval_auc_);
    AppendMetric(&out, "strata_worker_eval_log_loss", "gauge",
                 "Held-out log loss of the last evaluation.", eval_log_loss_);
  }
  return out;
}

}  // namespace strata
