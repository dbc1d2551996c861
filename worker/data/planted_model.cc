#include "worker/data/planted_model.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Scales of the planted terms, chosen so that the logit's spread gives a
// planted AUC near 0.8 (like models on the real Criteo data) with each kind
// of term contributing.
constexpr double kScalarScale = 0.25;
constexpr double kEmbeddingScale = 0.16;

constexpr int kPilotRows = 20000;
constexpr uint64_t kPilotStream = 2;

}  // namespace

std::vector<int64_t> DefaultVocabSizes() {
  std::vector<int64_t> sizes;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const double t = static_cast<double>(f) / (kCriteoNumCategorical - 1);
    sizes.push_back(std::llround(10.0 * std::pow(200000.0, t)));
  }
  return sizes;
}

absl::Status PlantedModel::ValidateOptions(const PlantedModelOptions& options) {
  const size_t num_sizes = options.vocab_sizes.size();
  if (num_sizes != 0 && num_sizes != kCriteoNumCategorical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need ", kCriteoNumCategorical, " vocabulary sizes, got ", num_sizes));
  }
  for (size_t f = 0; f < num_sizes; ++f) {
    const int64_t v = options.vocab_sizes[f];
    if (v < 1 || v > int64_t{0xFFFFFFFF}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary size ", v, " of C", f + 1, " is outside 1..4294967295"));
    }
  }
  if (!(options.zipf_s > 1.0 && options.zipf_s <= 3.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("zipf_s ", options.zipf_s, " is outside (1, 3]"));
  }
  if (!(options.target_ctr >= 0.001 && options.target_ctr <= 0.999)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target ctr ", options.target_ctr, " is outside [0.001, 0.999]"));
  }
  if (!(options.tail_rank > 0)) {
    return absl::InvalidArgumentError("tail_rank must be positive");
  }
  if (!(options.first_order_scale >= 0 && options.first_order_scale <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat("first_order_scale ",
                                                   options.first_order_scale,
                                                   " is outside [0, 100]"));
  }
  if (!(options.interaction_scale >= 0 && options.interaction_scale <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat("interaction_scale ",
                                                   options.interaction_scale,
                                                   " is outside [0, 100]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlantedModel> PlantedModel::Create(PlantedModelOptions options) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.vocab_sizes.empty()) options.vocab_sizes = DefaultVocabSizes();
  PlantedModel model(std::move(options));
  model.CalibrateBias();
  return model;
}

PlantedModel::PlantedModel(PlantedModelOptions options)
    : options_(std::move(options)),
      seed_mix_(Mix64(options_.seed ^ 0x504C414E544544ull)),  // "PLANTED"
      fields_(seed_mix_, options_.vocab_sizes),
      dense_(seed_mix_, /*negatives=*/true) {
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    zipf_.emplace_back(static_cast<uint64_t>(options_.vocab_sizes[f]),
                       options_.zipf_s);
  }
}

void PlantedModel::SampleRow(uint64_t stream, int64_t row,
                             SyntheticRow* out) const {
  out->ClearExtras();
  SplitMix64Rng rng(
      Mix64(Mix64(seed_mix_ ^ stream) + static_cast<uint64_t>(row)));
  dense_.Sample(rng, out);
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    if (fields_.DrawMissing(f, rng)) {
      out->ranks[f] = 0;
    } else {
      out->ranks[f] = static_cast<uint32_t>(zipf_[f].Sample(rng));
    }
  }
  out->label_draw = rng.Uniform();
}

double PlantedModel::Shrink(uint32_t rank) const {
  if (rank == 0) return 1.0;
  return options_.tail_rank / (options_.tail_rank + rank);
}

uint64_t PlantedModel::ParamBase(int field, uint32_t rank) const {
  // Distinct (field, rank) give distinct inputs, as in CriteoFeatureKey.
  return Mix64(seed_mix_ ^
               ((static_cast<uint64_t>(field) + 1) << 33 | uint64_t{rank}));
}

double PlantedModel::Logit(const SyntheticRow& row) const {
  double logit = bias_ + dense_.Logit(row);
  // sum_{f<g} <e_f, e_g> = (|sum_f e_f|^2 - sum_f |e_f|^2) / 2.
  double sum[kEmbeddingDim] = {};
  double sum_of_squares = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const uint64_t base = ParamBase(f, row.ranks[f]);
    const double shrink = Shrink(row.ranks[f]);
    logit += options_.first_order_scale * kScalarScale * shrink *
             UnitVarianceUniform(Mix64(base));
    for (int d = 0; d < kEmbeddingDim; ++d) {
      // The square root: each pairwise product scales by interaction_scale.
      const double e = std::sqrt(options_.interaction_scale) * kEmbeddingScale *
                       shrink * UnitVarianceUniform(Mix64(base + 1 + d));
      sum[d] += e;
      sum_of_squares += e * e;
    }
  }
  double norm2 = 0;
  for (double s : sum) norm2 += s * s;
  return logit + 0.5 * (norm2 - sum_of_squares);
}

uint32_t PlantedModel::HexOf(int field, uint32_t rank) const {
  return fields_.HexOf(field, rank);
}

bool PlantedModel::RankOf(int field, uint32_t hex, uint32_t* rank) const {
  return fields_.RankOf(field, hex, rank);
}

// Finds the bias that makes the mean probability of a pilot sample (its own
// stream, so the choice does not depend on --rows) equal target_ctr.
void PlantedModel::CalibrateBias() {
  bias_ = 0;
  std::vector<double> logits(kPilotRows);
  SyntheticRow row;
  for (int r = 0; r < kPilotRows; ++r) {
    SampleRow(kPilotStream, r, &row);
    logits[r] = Logit(row);
  }
  bias_ = BiasForMeanProbability(logits, options_.target_ctr);
}

}  // namespace strata
