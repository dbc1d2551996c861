#include "worker/data/learnable_ceiling.h"

#include <cmath>

#include "worker/data/random.h"

namespace strata {
namespace {

constexpr double kLearningRate = 0.1;
constexpr double kInitialSum = 0.01;
// Initial vectors: a tenth of their prior scale (zero vectors would get no
// gradient).
constexpr double kInitialVectorScale = 0.1;

void AdagradStep(double gradient, double* value, double* sum) {
  *sum += gradient * gradient;
  *value -= kLearningRate * gradient / std::sqrt(*sum);
}

}  // namespace

LearnableCeiling::LearnableCeiling(const RealisticModel& model)
    : model_(model), bias_sum_(kInitialSum) {
  for (double& sum : dense_sum_) sum = kInitialSum;
}

uint64_t LearnableCeiling::ValueKey(int field, uint32_t rank) {
  return static_cast<uint64_t>(field) << 32 | rank;
}

uint32_t LearnableCeiling::ParamOf(int field, uint32_t rank) {
  const uint32_t next = static_cast<uint32_t>(field_.size());
  const auto [it, added] = index_.try_emplace(ValueKey(field, rank), next);
  if (!added) return it->second;
  field_.push_back(static_cast<uint8_t>(field));
  weight_.push_back(0);
  weight_sum_.push_back(kInitialSum);
  const double weight_stddev = model_.FirstOrderStddev(field, rank);
  weight_precision_.push_back(
      weight_stddev > 0 ? 1 / (weight_stddev * weight_stddev) : 1e12);
  const double vector_stddev = model_.VectorStddev(field, rank);
  vector_precision_.push_back(
      vector_stddev > 0 ? 1 / (vector_stddev * vector_stddev) : 1e12);
  SplitMix64Rng rng(Mix64(ValueKey(field, rank)));
  for (int d = 0; d < kDim; ++d) {
    vector_.push_back(kInitialVectorScale * vector_stddev * rng.Normal());
    vector_sum_.push_back(kInitialSum);
  }
  count_.push_back(0);
  return next;
}

void LearnableCeiling::AddTrainingRow(const SyntheticRow& row, bool label) {
  labels_.push_back(label ? 1 : 0);
  for (int i = 0; i < kCriteoNumDense; ++i) {
    dense_.push_back(row.int_present[i] ? CriteoDenseTransform(row.ints[i])
                                        : 0.0f);
  }
  size_t extra = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const uint32_t first = ParamOf(f, row.ranks[f]);
    values_.push_back(first);
    ++count_[first];
    for (int k = 0; k < row.extra_counts[f]; ++k) {
      const uint32_t param = ParamOf(f, row.extra_ranks[extra++]);
      values_.push_back(param);
      ++count_[param];
    }
  }
  row_end_.push_back(values_.size());
}

double LearnableCeiling::PredictLogit(const SyntheticRow& row) const {
  double logit = bias_;
  for (int i = 0; i < kCriteoNumDense; ++i) {
    if (row.int_present[i]) {
      logit += dense_weight_[i] * CriteoDenseTransform(row.ints[i]);
    }
  }
  const double* vectors[kCriteoNumCategorical] = {};
  size_t extra = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const int count = 1 + row.extra_counts[f];
    double sum = 0;
    for (int k = 0; k < count; ++k) {
      const uint32_t rank = k == 0 ? row.ranks[f] : row.extra_ranks[extra++];
      const auto it = index_.find(ValueKey(f, rank));
      if (it == index_.end()) continue;  // never seen: the prior mean, 0
      sum += weight_[it->second];
      if (k == 0) vectors[f] = &vector_[size_t{it->second} * kDim];
    }
    logit += sum / count;
  }
  for (const auto& [f, g] : RealisticModel::Pairs()) {
    if (vectors[f] == nullptr || vectors[g] == nullptr) continue;
    for (int d = 0; d < kDim; ++d) logit += vectors[f][d] * vectors[g][d];
  }
  return logit;
}

// One Adagrad step on training row `r`: its log loss plus, for each of its
// parameters, that parameter's prior spread over its occurrences (so that an
// epoch adds each prior once).
void LearnableCeiling::Step(size_t r) {
  const size_t begin = r == 0 ? 0 : row_end_[r - 1];
  const size_t end = row_end_[r];
  const float* dense = &dense_[r * kCriteoNumDense];
  double logit = bias_;
  for (int i = 0; i < kCriteoNumDense; ++i) {
    logit += dense_weight_[i] * dense[i];
  }
  // Values of a field are adjacent; a field's term is their mean.
  int field_count[kCriteoNumCategorical] = {};
  uint32_t first_param[kCriteoNumCategorical] = {};
  for (size_t k = begin; k < end; ++k) {
    const int f = field_[values_[k]];
    if (field_count[f]++ == 0) first_param[f] = values_[k];
  }
  for (size_t k = begin; k < end; ++k) {
    logit += weight_[values_[k]] / field_count[field_[values_[k]]];
  }
  for (const auto& [f, g] : RealisticModel::Pairs()) {
    const double* a = &vector_[size_t{first_param[f]} * kDim];
    const double* b = &vector_[size_t{first_param[g]} * kDim];
    for (int d = 0; d < kDim; ++d) logit += a[d] * b[d];
  }
  const double error =
      SyntheticModel::Sigmoid(logit) - static_cast<double>(labels_[r]);
  AdagradStep(error, &bias_, &bias_sum_);
  for (int i = 0; i < kCriteoNumDense; ++i) {
    AdagradStep(error * dense[i], &dense_weight_[i], &dense_sum_[i]);
  }
  for (const auto& [f, g] : RealisticModel::Pairs()) {
    const uint32_t pf = first_param[f];
    const uint32_t pg = first_param[g];
    double* a = &vector_[size_t{pf} * kDim];
    double* b = &vector_[size_t{pg} * kDim];
    for (int d = 0; d < kDim; ++d) {
      const double grad_a =
          error * b[d] + a[d] * vector_precision_[pf] / count_[pf];
      const double grad_b =
          error * a[d] + b[d] * vector_precision_[pg] / count_[pg];
      AdagradStep(grad_a, &a[d], &vector_sum_[size_t{pf} * kDim + d]);
      AdagradStep(grad_b, &b[d], &vector_sum_[size_t{pg} * kDim + d]);
    }
  }
  for (size_t k = begin; k < end; ++k) {
    const uint32_t p = values_[k];
    const double gradient = error / field_count[field_[p]] +
                            weight_[p] * weight_precision_[p] / count_[p];
    AdagradStep(gradient, &weight_[p], &weight_sum_[p]);
  }
}

void LearnableCeiling::Fit(int epochs) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (size_t r = 0; r < labels_.size(); ++r) Step(r);
  }
}

void LearnableCeiling::CountUnseen(const SyntheticRow& row, int64_t* unseen,
                                   int64_t* total) const {
  size_t extra = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const int count = 1 + row.extra_counts[f];
    for (int k = 0; k < count; ++k) {
      const uint32_t rank = k == 0 ? row.ranks[f] : row.extra_ranks[extra++];
      ++*total;
      if (!Seen(f, rank)) ++*unseen;
    }
  }
}

bool LearnableCeiling::Seen(int field, uint32_t rank) const {
  return index_.contains(ValueKey(field, rank));
}

}  // namespace strata
