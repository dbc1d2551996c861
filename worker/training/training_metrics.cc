#include "worker/training/training_metrics.h"

namespace strata {

void TrainingMetrics::RecordStep(int64_t step, int64_t rank_examples,
                                 int64_t global_examples) {
  absl::MutexLock lock(&mu_);
  now_.step = step;
  now_.rank_examples += rank_examples;
  now_.global_examples += global_examples;
}

void TrainingMetrics::RecordProgress(double loss, double samples_per_second) {
  absl::MutexLock lock(&mu_);
  now_.loss = loss;
  now_.samples_per_second = samples_per_second;
}

void TrainingMetrics::RecordEval(double auc, double log_loss) {
  absl::MutexLock lock(&mu_);
  now_.evaluated = true;
  now_.eval_auc = auc;
  now_.eval_log_loss = log_loss;
}

void TrainingMetrics::RecordPushedKeys(int64_t total) {
  absl::MutexLock lock(&mu_);
  now_.pushed_keys = total;
}

void TrainingMetrics::RecordMalformedLines(int64_t total) {
  absl::MutexLock lock(&mu_);
  now_.malformed_lines = total;
}

void TrainingMetrics::AddMetrics(MetricFamilies* families) const {
  const TrainingSnapshot now = Snapshot();
  AddGauge(families, "strata_worker_global_step",
           "Steps taken by the job (restored steps included).",
           static_cast<double>(now.step));
  AddCounter(families, "strata_worker_examples_total",
             "Examples this rank trained on.", now.rank_examples);
  AddCounter(families, "strata_worker_job_examples_total",
             "Examples all ranks trained on, as this rank counted them.",
             now.global_examples);
  AddGauge(families, "strata_worker_loss",
           "Mean cross-entropy over the last progress interval, all "
           "ranks.",
           now.loss);
  AddGauge(families, "strata_worker_samples_per_second",
           "Examples per second over the last progress interval, all "
           "ranks.",
           now.samples_per_second);
  AddCounter(families, "strata_worker_pushed_keys_total",
             "Row gradients this rank's pushes delivered.", now.pushed_keys);
  AddCounter(families, "strata_worker_malformed_lines_total",
             "Input lines of this rank skipped as malformed.",
             now.malformed_lines);
  if (now.evaluated) {
    AddGauge(families, "strata_worker_eval_auc",
             "Held-out AUC of the last evaluation.", now.eval_auc);
    AddGauge(families, "strata_worker_eval_log_loss",
             "Held-out log loss of the last evaluation.", now.eval_log_loss);
  }
}

TrainingSnapshot TrainingMetrics::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

}  // namespace strata
