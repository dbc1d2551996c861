#ifndef STRATA_WORKER_TRAINING_STATUS_PAGE_H_
#define STRATA_WORKER_TRAINING_STATUS_PAGE_H_

#include <string>
#include <vector>

#include "common/rate_history.h"
#include "worker/training/training_metrics.h"

namespace strata {

// Who a training rank is, for its status page.
struct WorkerIdentity {
  int rank = 0;
  int num_workers = 1;
  std::string device;  // "cpu", or the GPU's name
  std::string model;   // DescribeModel()
  int num_shards = 0;
};

// The readings of TrainingMetrics that the page's charts are drawn from,
// one CounterReading a second: counters {job examples, step}, gauges
// {loss, held-out AUC (0 before the first evaluation)}.
CounterReading WorkerReading(const TrainingSnapshot& now);

// A training rank's status as an HTML page that reloads itself every
// `refresh_seconds`: charts of `history` (samples/s, steps/s, loss,
// held-out AUC over the last minutes) and the numbers of `now`, which are
// those of /metrics at the same moment. Elements carry ids (step,
// examples, loss, eval-auc, ...) so that scripts and tests can read them.
std::string RenderWorkerStatusPage(const WorkerIdentity& identity,
                                   const TrainingSnapshot& now,
                                   const std::vector<RateSample>& history,
                                   int refresh_seconds);

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_STATUS_PAGE_H_
