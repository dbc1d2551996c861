#include "worker/training/training_metrics.h"

namespace strata {

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

void TrainingMetrics::AddMetrics(MetricFamilies* families) const {
  absl::MutexLock lock(&mu_);
  AddGauge(families, "strata_worker_global_step",
           "Steps taken by the job (restored steps included).",
           static_cast<double>(step_));
  AddCounter(families, "strata_worker_examples_total",
             "Examples this rank trained on.", rank_examples_);
  AddCounter(families, "strata_worker_job_examples_total",
             "Examples all ranks trained on, as this rank counted them.",
             global_examples_);
  AddGauge(families, "strata_worker_loss",
           "Mean cross-entropy over the last progress interval, all "
           "ranks.",
           loss_);
  AddGauge(families, "strata_worker_samples_per_second",
           "Examples per second over the last progress interval, all "
           "ranks.",
           samples_per_second_);
  AddCounter(families, "strata_worker_pushed_keys_total",
             "Row gradients this rank's pushes delivered.", pushed_keys_);
  AddCounter(families, "strata_worker_malformed_lines_total",
             "Input lines of this rank skipped as malformed.",
             malformed_lines_);
  if (evaluated_) {
    AddGauge(families, "strata_worker_eval_auc",
             "Held-out AUC of the last evaluation.", eval_auc_);
    AddGauge(families, "strata_worker_eval_log_loss",
             "Held-out log loss of the last evaluation.", eval_log_loss_);
  }
}

}  // namespace strata
