#ifndef STRATA_WORKER_TRAINING_TRAINING_METRICS_H_
#define STRATA_WORKER_TRAINING_TRAINING_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace strata {

// The numbers of TrainingMetrics at one moment.
struct TrainingSnapshot {
  int64_t step = 0;
  int64_t rank_examples = 0;
  int64_t global_examples = 0;
  double loss = 0;
  double samples_per_second = 0;
  bool evaluated = false;
  double eval_auc = 0;
  double eval_log_loss = 0;
  int64_t pushed_keys = 0;
  int64_t malformed_lines = 0;
};

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
  TrainingSnapshot Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  TrainingSnapshot now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_TRAINING_METRICS_H_
