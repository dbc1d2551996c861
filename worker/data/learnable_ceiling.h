#ifndef STRATA_WORKER_DATA_LEARNABLE_CEILING_H_
#define STRATA_WORKER_DATA_LEARNABLE_CEILING_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "worker/data/realistic_model.h"

namespace strata {

// The learnable ceiling of a realistic data set: an estimator that knows the
// generator's form (which terms exist, the multi-hot means, each parameter's
// prior scale) but not its parameters, fitted on the training rows alone
// (maximum a posteriori: log loss plus each parameter's Gaussian prior, by
// Adagrad). Its held-out AUC is about what a perfect learner of that form
// could reach on that data: values never seen in training get their prior
// mean, 0.
//
//   LearnableCeiling oracle(model);
//   for (each training row) oracle.AddTrainingRow(row, label);
//   oracle.Fit();
//   double logit = oracle.PredictLogit(holdout_row);
//
// Keeps every training row (about 4 bytes per value plus 60 per row). Not
// thread-safe.
class LearnableCeiling {
 public:
  explicit LearnableCeiling(const RealisticModel& model);

  void AddTrainingRow(const SyntheticRow& row, bool label);
  void Fit(int epochs = 4);
  double PredictLogit(const SyntheticRow& row) const;

  // Values of `row` (each field's, multi-hot ones each) never seen in
  // training, and all of its values.
  void CountUnseen(const SyntheticRow& row, int64_t* unseen,
                   int64_t* total) const;
  bool Seen(int field, uint32_t rank) const;

 private:
  static constexpr int kDim = RealisticModel::kVectorDim;
  static uint64_t ValueKey(int field, uint32_t rank);
  uint32_t ParamOf(int field, uint32_t rank);
  void Step(size_t row);

  const RealisticModel& model_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  // Per parameter: its field, weight and vector, Adagrad sums, occurrences
  // and the inverse prior variances.
  std::vector<uint8_t> field_;
  std::vector<double> weight_;
  std::vector<double> weight_sum_;
  std::vector<double> vector_;
  std::vector<double> vector_sum_;
  std::vector<uint32_t> count_;
  std::vector<double> weight_precision_;
  std::vector<double> vector_precision_;
  double bias_ = 0;
  double bias_sum_;
  double dense_weight_[kCriteoNumDense] = {};
  double dense_sum_[kCriteoNumDense];
  // The training rows: labels, dense inputs, and parameter indices.
  std::vector<uint8_t> labels_;
  std::vector<float> dense_;
  std::vector<uint32_t> values_;
  std::vector<uint64_t> row_end_;
};

}  // namespace strata

#endif  // STRATA_WORKER_DATA_LEARNABLE_CEILING_H_
