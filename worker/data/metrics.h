#ifndef STRATA_WORKER_DATA_METRICS_H_
#define STRATA_WORKER_DATA_METRICS_H_

#include "absl/types/span.h"

namespace strata {

// Exact metrics of a binary classifier over a whole data set (not sampled).
// A label counts as positive iff it is > 0.5. Thread-compatible; no state.
//
//   const double auc = ExactAuc(batch.labels, predictions);

// Area under the ROC curve: the probability that a random positive scores
// above a random negative, a tied pair counting 1/2 (Mann-Whitney with
// midranks). O(n log n) time, O(n) extra memory.
// Returns NaN when there is no positive or no negative (AUC is undefined),
// or when the spans differ in size or a score is NaN.
double ExactAuc(absl::Span<const float> labels, absl::Span<const float> scores);
double ExactAuc(absl::Span<const float> labels,
                absl::Span<const double> scores);

// Mean binary cross-entropy of probabilities `probabilities` (clipped to
// [1e-15, 1 - 1e-15], so a confident mistake costs about 34.5, not infinity).
// Returns NaN when the spans are empty or differ in size.
double LogLoss(absl::Span<const float> labels,
               absl::Span<const float> probabilities);
double LogLoss(absl::Span<const float> labels,
               absl::Span<const double> probabilities);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_METRICS_H_
