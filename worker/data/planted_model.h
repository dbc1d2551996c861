#ifndef STRATA_WORKER_DATA_PLANTED_MODEL_H_
#define STRATA_WORKER_DATA_PLANTED_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/criteo_format.h"
#include "worker/data/random.h"
#include "worker/data/synthetic_model.h"

namespace strata {

struct PlantedModelOptions {
  uint64_t seed = 1;
  // Vocabulary size of each of the 26 categorical fields, each in
  // 1..2^32-1. Default: DefaultVocabSizes().
  std::vector<int64_t> vocab_sizes;
  // Exponent of the Zipf distribution of each field's values; > 1.
  double zipf_s = 1.1;
  // The bias is calibrated so that the mean click probability is this.
  double target_ctr = 0.25;
  // A value of frequency rank r carries its effects scaled by
  // tail_rank / (tail_rank + r): rare values, which a trained model sees too
  // seldom to learn, carry little of the signal. > 0.
  double tail_rank = 1000;
  // Scales of the two kinds of categorical effect, each >= 0: the scalar
  // a_f(v) (first-order: what a logistic regression on the same features
  // can learn) and the pairwise dot products (interactions). 0 turns one
  // off: interaction_scale = 0 gives data whose signal is first-order only.
  double first_order_scale = 1.0;
  double interaction_scale = 1.0;
};

// 26 sizes growing geometrically from 10 to 2,000,000.
std::vector<int64_t> DefaultVocabSizes();

// The ground truth behind strata-datagen's data. Every parameter is a pure
// function of (seed, field, value):
//
//   logit = bias + sum_i w_i t_i + sum_f a_f(v_f)
//                + sum_{f<g} <e_f(v_f), e_g(v_g)>
//
// t_i = CriteoDenseTransform(I_i) (0 if empty), exactly what CriteoReader
// gives; a_f(v) a scalar and e_f(v) an 8-dim embedding per value (the empty
// value has its own), both shrunk for rare values (see tail_rank). This is a
// DLRM's dot interaction, so a DLRM can learn it. Categorical value of rank r
// is written as HexOf(field, r), a keyed bijection, so values of a field never
// collide. Immutable after Create; thread-safe.
class PlantedModel : public SyntheticModel {
 public:
  static constexpr int kEmbeddingDim = 8;

  // INVALID_ARGUMENT naming the first bad option.
  static absl::Status ValidateOptions(const PlantedModelOptions& options);

  // INVALID_ARGUMENT for bad options. Calibrates the bias on a pilot sample.
  static absl::StatusOr<PlantedModel> Create(PlantedModelOptions options);

  void SampleRow(uint64_t stream, int64_t row,
                 SyntheticRow* out) const override;
  double Logit(const SyntheticRow& row) const override;
  uint32_t HexOf(int field, uint32_t rank) const override;
  bool RankOf(int field, uint32_t hex, uint32_t* rank) const override;

  double bias() const override { return bias_; }
  const PlantedModelOptions& options() const { return options_; }

 private:
  explicit PlantedModel(PlantedModelOptions options);
  double Shrink(uint32_t rank) const;
  uint64_t ParamBase(int field, uint32_t rank) const;
  void CalibrateBias();

  PlantedModelOptions options_;
  uint64_t seed_mix_;
  SyntheticFields fields_;
  SyntheticDenseFeatures dense_;
  double bias_ = 0;
  std::vector<ZipfSampler> zipf_;
};

}  // namespace strata

#endif  // STRATA_WORKER_DATA_PLANTED_MODEL_H_
