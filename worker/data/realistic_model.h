#ifndef STRATA_WORKER_DATA_REALISTIC_MODEL_H_
#define STRATA_WORKER_DATA_REALISTIC_MODEL_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/planted_model.h"
#include "worker/data/random.h"
#include "worker/data/synthetic_model.h"

namespace strata {

// What the realistic generator adds to the shared options.
struct RealisticOptions {
  // Share of rows whose user or ad (each drawn separately) is a new one,
  // arrived shortly before the row: such ids are rare in training and many
  // of the holdout's were never seen. In [0, 1).
  double drift_share = 0.2;
  // The last N context fields (C26, C25, .. at most C23) are multi-hot.
  int multi_hot_fields = 0;
  // Mean number of values of a multi-hot field (geometric, at most 64).
  double mean_values = 4;
  // Training rows per unit of time: the holdout follows the training rows
  // in time. strata-datagen sets it to --rows.
  int64_t time_rows = 1000000;
};

// Standard deviations of a row's logit terms on a pilot sample.
struct LogitSpread {
  double dense = 0;
  double first_order = 0;  // every field's own effect, ids excluded
  double entity = 0;       // the user's and the ad's own effects (id fields)
  double interaction = 0;  // the sparse pairwise terms
  double total = 0;
};

// A generator whose signal sits where real click logs' does:
//
//   logit = bias + sum_i w_i t_i + sum_f a_f(values of f)
//                + sum_{(f,g) in pairs} <e_f(v_f), e_g(v_g)>
//
// - Fields describe three things: a user (C1..C10; C1 is the user id, C2 a
//   coarse segment), an ad (C11..C20; C11 the ad id, C12 a segment) and the
//   context (C21..C26). A user's and an ad's attribute values are fixed per
//   id (drawn from the field's Zipf law, then replaced by a fresh draw in
//   10% of rows), so fields are correlated through the hidden user and ad.
// - Single-feature effects dominate: a_f(v) has scale shrinking with the
//   value's frequency rank r as tail_rank / (tail_rank + r). The id fields
//   carry the entity's own effect, which does not shrink; 60% of its
//   variance is shared with the entity's segment, so a rare or new id is
//   partly predictable from common values.
// - Four low-rank (4-dim) interactions between chosen field pairs.
// - Drift: ids are Zipf-distributed over a stable population (the first
//   half of an id field's vocabulary), except in a drift_share of rows,
//   which draw a recently arrived id from the second half.
// - Multi-hot context fields contribute the mean of their values' effects.
//
// Immutable after Create; thread-safe.
class RealisticModel : public SyntheticModel {
 public:
  static constexpr int kVectorDim = 4;
  static constexpr int kUserId = 0;
  static constexpr int kUserSegment = 1;
  static constexpr int kAdId = 10;
  static constexpr int kAdSegment = 11;
  static constexpr int kFirstContextField = 20;

  // INVALID_ARGUMENT naming the first bad option.
  static absl::Status ValidateOptions(const PlantedModelOptions& base,
                                      const RealisticOptions& options);
  static absl::StatusOr<std::unique_ptr<RealisticModel>> Create(
      PlantedModelOptions base, RealisticOptions options);

  // 26 sizes summing to 5,022,250: ids of 2,100,000 users and
  // 500,000 ads, segments of 20 and 50, other fields 10 to 1,500,000.
  static std::vector<int64_t> DefaultVocabSizes();

  void SampleRow(uint64_t stream, int64_t row,
                 SyntheticRow* out) const override;
  double Logit(const SyntheticRow& row) const override;
  uint32_t HexOf(int field, uint32_t rank) const override;
  bool RankOf(int field, uint32_t hex, uint32_t* rank) const override;
  double bias() const override { return bias_; }

  // The form, for an estimator that knows it (the learnable ceiling): the
  // interacting field pairs, whether a field is multi-hot, and the prior
  // standard deviation of each parameter of value `rank` of `field`.
  static const std::vector<std::pair<int, int>>& Pairs();
  bool IsMultiHot(int field) const;
  double FirstOrderStddev(int field, uint32_t rank) const;
  double VectorStddev(int field, uint32_t rank) const;

  const LogitSpread& spread() const { return spread_; }
  const PlantedModelOptions& base_options() const { return base_; }
  const RealisticOptions& options() const { return options_; }

 private:
  RealisticModel(PlantedModelOptions base, RealisticOptions options);
  LogitSpread Terms(const SyntheticRow& row) const;
  double Shrink(uint32_t rank) const;
  uint64_t ParamBase(int field, uint32_t rank) const;
  double FirstOrder(int field, uint32_t rank) const;
  double Vector(int field, uint32_t rank, int d) const;
  uint32_t SampleEntity(int id_field, double time, SplitMix64Rng& rng) const;
  uint32_t Attribute(int field, uint32_t entity) const;
  void SampleField(int field, uint32_t entity, SplitMix64Rng& rng,
                   SyntheticRow* out) const;
  void Calibrate();

  PlantedModelOptions base_;
  RealisticOptions options_;
  uint64_t seed_mix_;
  SyntheticFields fields_;
  SyntheticDenseFeatures dense_;
  double bias_ = 0;
  LogitSpread spread_;
  std::vector<ZipfSampler> zipf_;  // per field; id fields: the stable half
};

}  // namespace strata

#endif  // STRATA_WORKER_DATA_REALISTIC_MODEL_H_
