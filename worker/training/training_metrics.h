#ifndef STRATA_WORKER_TRAINING_TRAINING_METRICS_H_
#define STRATA_WORKER_TRAINING_TRAINING_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace strata {

// What a training rank exports on its metrics port (/metrics):
// steps, examples, the last progress interval's loss and samples/s, the
// last evaluation, pushed keys and skipped lines. The trainer writes, the
// HTTP thread reads. Thread-safe.
class TrainingMetrics {
 public:
  TrainingMetrics() = default;
  TrainingMetrics(const TrainingMetrics&) = delete;
  TrainingMetrics& operator=(const TrainingMetrics&) = delete;

  // After every step: this rank's and all ranks' examples of the step.
  void RecordStep(int64_t step, int64_t rank_examples, int64_t global_examples);
  // At every progress report (numbers over the interval, all ranks).
  void RecordProgress(double loss, double samples_per_second);
  void RecordEval(double auc, double log_loss);
  void RecordPushedKeys(int64_t total);
  void RecordMalformedLines(int64_t total);

  void AddMetrics(MetricFamilies* families) const;

 private:
  mutable absl::Mutex mu_;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rank_examples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t global_examples_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_ ABSL_GUARDED_BY(mu_) = 0;
  double samples_per_second_ ABSL_GUARDED_BY(mu_) = 0;
  bool evaluated_ ABSL_GUARDED_BY(mu_) = false;
  double eval_auc_ ABSL_GUARDED_BY(mu_) = 0;
  double eval_log_loss_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushed_keys_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t malformed_lines_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_TRAINING_METRICS_H_
