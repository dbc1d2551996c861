#include "worker/data/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace strata {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMinProbability = 1e-15;

template <typename Score>
double ExactAucImpl(absl::Span<const float> labels,
                    absl::Span<const Score> scores) {
  const size_t n = labels.size();
  if (scores.size() != n) return kNaN;
  for (Score s : scores) {
    if (std::isnan(s)) return kNaN;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Walk groups of equal score upwards. Each positive beats every negative
  // below its group and ties with the negatives in it. All counts are
  // integers or halves below 2^53, so the sums are exact.
  double negatives_below = 0;
  double area = 0;
  double positives = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    double group_pos = 0;
    double group_neg = 0;
    for (; j < n && scores[order[j]] == scores[order[i]]; ++j) {
      if (labels[order[j]] > 0.5f) {
        ++group_pos;
      } else {
        ++group_neg;
      }
    }
    area += group_pos * negatives_below + 0.5 * group_pos * group_neg;
    negatives_below += group_neg;
    positives += group_pos;
    i = j;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return area / (positives * negatives_below);
}

template <typename Probability>
double LogLossImpl(absl::Span<const float> labels,
                   absl::Span<const Probability> probabilities) {
  if (labels.empty() || probabilities.size() != labels.size()) return kNaN;
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probabilities[i]),
                                kMinProbability, 1.0 - kMinProbability);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log1p(-p);
  }
  return sum / static_cast<double>(labels.size());
}

}  // namespace

double ExactAuc(absl::Span<const float> labels,
                absl::Span<const float> scores) {
  return ExactAucImpl(labels, scores);
}

double ExactAuc(absl::Span<const float> labels,
                absl::Span<const double> scores) {
  return ExactAucImpl(labels, scores);
}

double LogLoss(absl::Span<const float> labels,
               absl::Span<const float> probabilities) {
  return LogLossImpl(labels, probabilities);
}

double LogLoss(absl::Span<const float> labels,
               absl::Span<const double> probabilities) {
  return LogLossImpl(labels, probabilities);
}

}  // namespace strata
