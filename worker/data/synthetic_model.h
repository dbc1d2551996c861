#ifndef STRATA_WORKER_DATA_SYNTHETIC_MODEL_H_
#define STRATA_WORKER_DATA_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/criteo_format.h"
#include "worker/data/random.h"

namespace strata {

// One synthetic example before it is written as text.
struct SyntheticRow {
  int64_t ints[kCriteoNumDense] = {};
  bool int_present[kCriteoNumDense] = {};      // false: written as empty
  uint32_t ranks[kCriteoNumCategorical] = {};  // 1..vocab; 0: empty (missing)
  // Multi-hot fields: the values after the first, in field order; field f
  // has extra_counts[f] of them (all 0 on single-hot rows).
  uint16_t extra_counts[kCriteoNumCategorical] = {};
  std::vector<uint32_t> extra_ranks;
  double label_draw = 0;  // uniform in (0, 1): label = draw < probability

  void ClearExtras() {
    for (uint16_t& count : extra_counts) count = 0;
    extra_ranks.clear();
  }
};

// The 13 integer fields of synthetic rows: log-normal counts, some often
// empty, and a linear effect of each one's CriteoDenseTransform on the logit.
// Parameters are drawn from `seed_mix`. Immutable; thread-safe.
class SyntheticDenseFeatures {
 public:
  // negatives: I2 is negative in 8% of rows, as in the real data.
  SyntheticDenseFeatures(uint64_t seed_mix, bool negatives);

  void Sample(SplitMix64Rng& rng, SyntheticRow* out) const;
  double Logit(const SyntheticRow& row) const;

 private:
  double weight_[kCriteoNumDense];
  double empty_rate_[kCriteoNumDense];
  double negative_rate_[kCriteoNumDense];
  double log_mean_[kCriteoNumDense];
  double log_stddev_[kCriteoNumDense];
};

// The 26 categorical fields' text and emptiness: value `rank` of field f is
// written as the 8 hex digits of Mix32(rank + key_f), a keyed bijection, so
// values of a field never collide; like the real data, every fourth field
// is often empty and the others never are. Keys and rates are drawn from
// `seed_mix`. Immutable; thread-safe.
class SyntheticFields {
 public:
  SyntheticFields(uint64_t seed_mix, const std::vector<int64_t>& vocab_sizes);

  uint32_t HexOf(int field, uint32_t rank) const;
  // Inverse of HexOf; false if `hex` is no value 1..vocab of the field.
  bool RankOf(int field, uint32_t hex, uint32_t* rank) const;
  // Whether a row leaves `field` empty (draws from `rng` only for fields
  // that can be).
  bool DrawMissing(int field, SplitMix64Rng& rng) const;

 private:
  int64_t vocab_[kCriteoNumCategorical];
  uint32_t hex_key_[kCriteoNumCategorical];
  double missing_rate_[kCriteoNumCategorical];
};

// The bias that makes the mean of Sigmoid(logit + bias) over `logits` equal
// `target` (bisection over [-30, 30]).
double BiasForMeanProbability(const std::vector<double>& logits, double target);

// The ground truth behind a synthetic data set: rows drawn from a seed, a
// logit per row, and the text of each categorical value. Implementations are
// immutable after creation and thread-safe.
class SyntheticModel {
 public:
  virtual ~SyntheticModel() = default;

  // Row `row` of stream `stream` (0: training data, 1: holdout); a pure
  // function of (seed, stream, row), so rows can be made in any order.
  virtual void SampleRow(uint64_t stream, int64_t row,
                         SyntheticRow* out) const = 0;
  virtual double Logit(const SyntheticRow& row) const = 0;
  // The 8-hex-digit text of value `rank` (>= 1) of categorical field
  // `field`, and its inverse (false if `hex` is no value of the field).
  virtual uint32_t HexOf(int field, uint32_t rank) const = 0;
  virtual bool RankOf(int field, uint32_t hex, uint32_t* rank) const = 0;
  virtual double bias() const = 0;

  static double Sigmoid(double logit);

  // Recomputes the logit of a line as strata-datagen writes it (40 fields,
  // multi-hot fields with ','); for checks. INVALID_ARGUMENT if the line is
  // not one this model wrote.
  struct LabeledLogit {
    float label;
    double logit;
  };
  absl::StatusOr<LabeledLogit> LogitOfLine(absl::string_view line) const;
};

}  // namespace strata

#endif  // STRATA_WORKER_DATA_SYNTHETIC_MODEL_H_
