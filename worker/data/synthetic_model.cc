#include "worker/data/synthetic_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace strata {
namespace {

// Parses one categorical field's text (empty, or values separated by ',')
// into row->ranks[f] and its extras; false if a value is not one of the
// model's.
bool ParseCategorical(const SyntheticModel& model, int f,
                      absl::string_view text, SyntheticRow* row) {
  row->ranks[f] = 0;
  if (text.empty()) return true;
  bool first = true;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(kCriteoValueSeparator, start);
    const absl::string_view value = text.substr(
        start, comma == absl::string_view::npos ? comma : comma - start);
    uint32_t hex = 0;
    uint32_t rank = 0;
    if (!ParseCriteoHex(value, &hex) || !model.RankOf(f, hex, &rank)) {
      return false;
    }
    if (first) {
      row->ranks[f] = rank;
      first = false;
    } else {
      row->extra_ranks.push_back(rank);
      ++row->extra_counts[f];
    }
    if (comma == absl::string_view::npos) return true;
    start = comma + 1;
  }
}

}  // namespace

SyntheticDenseFeatures::SyntheticDenseFeatures(uint64_t seed_mix,
                                               bool negatives) {
  constexpr double kWeightScale = 0.15;
  for (int i = 0; i < kCriteoNumDense; ++i) {
    SplitMix64Rng rng(Mix64(seed_mix ^ (0x200 + i)));
    weight_[i] = kWeightScale * (2 * rng.Uniform() - 1);
    const double u = rng.Uniform();
    empty_rate_[i] = i % 3 == 0 ? 0.0 : 0.02 + 0.43 * u;
    negative_rate_[i] = negatives && i == 1 ? 0.08 : 0.0;
    log_mean_[i] = 0.5 + 3.0 * rng.Uniform();
    log_stddev_[i] = 0.5 + 1.5 * rng.Uniform();
  }
}

void SyntheticDenseFeatures::Sample(SplitMix64Rng& rng,
                                    SyntheticRow* out) const {
  for (int i = 0; i < kCriteoNumDense; ++i) {
    out->int_present[i] = rng.Uniform() >= empty_rate_[i];
    out->ints[i] = 0;
    if (!out->int_present[i]) continue;
    if (negative_rate_[i] > 0 && rng.Uniform() < negative_rate_[i]) {
      out->ints[i] = -1 - static_cast<int64_t>(rng.Next() % 3);
    } else {
      const double x = std::exp(log_mean_[i] + log_stddev_[i] * rng.Normal());
      out->ints[i] = static_cast<int64_t>(std::fmin(std::floor(x), 1e9));
    }
  }
}

double SyntheticDenseFeatures::Logit(const SyntheticRow& row) const {
  double logit = 0;
  for (int i = 0; i < kCriteoNumDense; ++i) {
    if (row.int_present[i]) {
      logit += weight_[i] * CriteoDenseTransform(row.ints[i]);
    }
  }
  return logit;
}

SyntheticFields::SyntheticFields(uint64_t seed_mix,
                                 const std::vector<int64_t>& vocab_sizes) {
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    vocab_[f] = vocab_sizes[f];
    SplitMix64Rng rng(Mix64(seed_mix ^ (0x100 + f)));
    hex_key_[f] = static_cast<uint32_t>(rng.Next());
    const double u = rng.Uniform();
    missing_rate_[f] = f % 4 == 3 ? 0.05 + 0.35 * u : 0.0;
  }
}

uint32_t SyntheticFields::HexOf(int field, uint32_t rank) const {
  return Mix32(rank + hex_key_[field]);
}

bool SyntheticFields::RankOf(int field, uint32_t hex, uint32_t* rank) const {
  const uint32_t r = Unmix32(hex) - hex_key_[field];
  if (r < 1 || r > vocab_[field]) return false;
  *rank = r;
  return true;
}

bool SyntheticFields::DrawMissing(int field, SplitMix64Rng& rng) const {
  return missing_rate_[field] > 0 && rng.Uniform() < missing_rate_[field];
}

double BiasForMeanProbability(const std::vector<double>& logits,
                              double target) {
  double lo = -30;
  double hi = 30;
  for (int iteration = 0; iteration < 60; ++iteration) {
    const double mid = 0.5 * (lo + hi);
    double mean = 0;
    for (double z : logits) mean += SyntheticModel::Sigmoid(z + mid);
    mean /= static_cast<double>(logits.size());
    (mean < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double SyntheticModel::Sigmoid(double logit) {
  return 1.0 / (1.0 + std::exp(-logit));
}

absl::StatusOr<SyntheticModel::LabeledLogit> SyntheticModel::LogitOfLine(
    absl::string_view line) const {
  SyntheticRow row;
  LabeledLogit result{0, 0};
  int field = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const absl::string_view text =
        line.substr(start, tab == absl::string_view::npos ? tab : tab - start);
    bool ok = true;
    if (field >= kCriteoNumFields) {
      ok = false;
    } else if (field == 0) {
      ok = text == "0" || text == "1";
      result.label = text == "1" ? 1.0f : 0.0f;
    } else if (field <= kCriteoNumDense) {
      row.int_present[field - 1] = !text.empty();
      ok = text.empty() || ParseCriteoInteger(text, &row.ints[field - 1]);
    } else {
      ok = ParseCategorical(*this, field - 1 - kCriteoNumDense, text, &row);
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field ", field, " '", text, "' is not one this model writes"));
    }
    ++field;
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  if (field != kCriteoNumFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("line has ", field, " fields, not ", kCriteoNumFields));
  }
  result.logit = Logit(row);
  return result;
}

}  // namespace strata
