#include "worker/data/realistic_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Scales of the terms (before first_order_scale and interaction_scale),
// chosen so that single-feature effects carry most of the logit's variance
// and the Bayes AUC is near 0.8, like models on real click logs.
constexpr double kFirstOrderScale = 0.22;
constexpr double kEntityScale = 0.45;
constexpr double kVectorScale = 0.45;
// Share of an entity effect's variance that its segment explains.
constexpr double kSegmentShare = 0.6;
// Share of rows in which an attribute of the user or ad is a fresh draw.
constexpr double kAttributeNoise = 0.1;
constexpr int kMaxMultiHotFields = 4;
constexpr int kMaxValuesPerField = 64;
// New ids arrive at (second half of the vocabulary) / kIdCycle per unit of
// time, so they are reused after kIdCycle units; a drifted row draws one of
// those that arrived in the last kRecentWindow units.
constexpr double kIdCycle = 4;
constexpr double kRecentWindow = 0.05;

constexpr int kPilotRows = 20000;
constexpr uint64_t kPilotStream = 2;

bool IsIdField(int field) {
  return field == RealisticModel::kUserId || field == RealisticModel::kAdId;
}

// The id field of the entity a field describes; -1 for context fields.
int EntityOf(int field) {
  if (field < RealisticModel::kAdId) return RealisticModel::kUserId;
  if (field < RealisticModel::kFirstContextField) return RealisticModel::kAdId;
  return -1;
}

int SegmentOf(int id_field) {
  return id_field == RealisticModel::kUserId ? RealisticModel::kUserSegment
                                             : RealisticModel::kAdSegment;
}

uint32_t StableIds(int64_t vocab) {
  return static_cast<uint32_t>(std::max<int64_t>(1, vocab / 2));
}

double StandardDeviation(const std::vector<double>& values) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double sum = 0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size()));
}

}  // namespace

std::vector<int64_t> RealisticModel::DefaultVocabSizes() {
  return {// user: id, segment, attributes
          2100000, 20, 100, 1000, 10000, 100000, 30, 300, 3000, 30000,
          // ad: id, segment, attributes
          500000, 50, 200, 2000, 20000, 200000, 40, 400, 4000, 40000,
          // context
          10, 1000, 1500000, 100, 10000, 500000};
}

const std::vector<std::pair<int, int>>& RealisticModel::Pairs() {
  static const auto* const kPairs =
      new std::vector<std::pair<int, int>>{{2, 12}, {3, 13}, {4, 20}, {14, 21}};
  return *kPairs;
}

absl::Status RealisticModel::ValidateOptions(const PlantedModelOptions& base,
                                             const RealisticOptions& options) {
  STRATA_RETURN_IF_ERROR(PlantedModel::ValidateOptions(base));
  if (!(options.drift_share >= 0 && options.drift_share < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "drift_share ", options.drift_share, " is outside [0, 1)"));
  }
  if (options.multi_hot_fields < 0 ||
      options.multi_hot_fields > kMaxMultiHotFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi_hot_fields ", options.multi_hot_fields,
                     " is outside 0..", kMaxMultiHotFields));
  }
  if (!(options.mean_values >= 1 && options.mean_values <= 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean_values ", options.mean_values, " is outside [1, 16]"));
  }
  if (options.time_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_rows ", options.time_rows, " is not positive"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RealisticModel>> RealisticModel::Create(
    PlantedModelOptions base, RealisticOptions options) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(base, options));
  if (base.vocab_sizes.empty()) base.vocab_sizes = DefaultVocabSizes();
  std::unique_ptr<RealisticModel> model(
      new RealisticModel(std::move(base), options));
  model->Calibrate();
  return model;
}

RealisticModel::RealisticModel(PlantedModelOptions base,
                               RealisticOptions options)
    : base_(std::move(base)),
      options_(options),
      seed_mix_(Mix64(base_.seed ^ 0x5245414C495354ull)),  // "REALIST"
      fields_(seed_mix_, base_.vocab_sizes),
      dense_(seed_mix_, /*negatives=*/false) {
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    const int64_t vocab = base_.vocab_sizes[f];
    zipf_.emplace_back(IsIdField(f) ? StableIds(vocab) : vocab, base_.zipf_s);
  }
}

bool RealisticModel::IsMultiHot(int field) const {
  return field >= kCriteoNumCategorical - options_.multi_hot_fields;
}

uint32_t RealisticModel::SampleEntity(int id_field, double time,
                                      SplitMix64Rng& rng) const {
  const int64_t vocab = base_.vocab_sizes[id_field];
  const uint32_t stable = StableIds(vocab);
  const int64_t fresh = vocab - stable;
  if (fresh < 1 || rng.Uniform() >= options_.drift_share) {
    return static_cast<uint32_t>(zipf_[id_field].Sample(rng));
  }
  const double per_time = std::max(1.0, fresh / kIdCycle);
  const int64_t window =
      std::max<int64_t>(1, std::llround(per_time * kRecentWindow));
  const int64_t arrived = static_cast<int64_t>(time * per_time) -
                          static_cast<int64_t>(rng.Next() % window);
  const int64_t index = ((arrived % fresh) + fresh) % fresh;
  return stable + 1 + static_cast<uint32_t>(index);
}

// The value an entity has in `field`: a Zipf draw seeded by the entity.
uint32_t RealisticModel::Attribute(int field, uint32_t entity) const {
  SplitMix64Rng rng(Mix64(seed_mix_ ^ (uint64_t{entity} << 8 | field)));
  return static_cast<uint32_t>(zipf_[field].Sample(rng));
}

void RealisticModel::SampleField(int field, uint32_t entity, SplitMix64Rng& rng,
                                 SyntheticRow* out) const {
  if (fields_.DrawMissing(field, rng)) {
    out->ranks[field] = 0;
    return;
  }
  if (entity != 0 && rng.Uniform() >= kAttributeNoise) {
    out->ranks[field] = Attribute(field, entity);
    return;
  }
  out->ranks[field] = static_cast<uint32_t>(zipf_[field].Sample(rng));
  if (!IsMultiHot(field)) return;
  // Geometric count with the given mean, at least 1.
  const double stop = 1.0 / options_.mean_values;
  uint16_t extra = 0;
  while (extra + 1 < kMaxValuesPerField && rng.Uniform() >= stop) {
    out->extra_ranks.push_back(static_cast<uint32_t>(zipf_[field].Sample(rng)));
    ++extra;
  }
  out->extra_counts[field] = extra;
}

void RealisticModel::SampleRow(uint64_t stream, int64_t row,
                               SyntheticRow* out) const {
  out->ClearExtras();
  SplitMix64Rng rng(
      Mix64(Mix64(seed_mix_ ^ stream) + static_cast<uint64_t>(row)));
  dense_.Sample(rng, out);
  // The holdout (stream 1) comes after the training rows in time.
  const double time =
      static_cast<double>(row) / options_.time_rows + (stream == 1 ? 1.0 : 0.0);
  const uint32_t user = SampleEntity(kUserId, time, rng);
  const uint32_t ad = SampleEntity(kAdId, time, rng);
  out->ranks[kUserId] = user;
  out->ranks[kAdId] = ad;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    if (IsIdField(f)) continue;
    const int id_field = EntityOf(f);
    const uint32_t entity =
        id_field < 0 ? 0 : (id_field == kUserId ? user : ad);
    SampleField(f, entity, rng, out);
  }
  out->label_draw = rng.Uniform();
}

double RealisticModel::Shrink(uint32_t rank) const {
  if (rank == 0) return 1.0;
  return base_.tail_rank / (base_.tail_rank + rank);
}

uint64_t RealisticModel::ParamBase(int field, uint32_t rank) const {
  return Mix64(seed_mix_ ^
               ((static_cast<uint64_t>(field) + 1) << 33 | uint64_t{rank}));
}

double RealisticModel::FirstOrderStddev(int field, uint32_t rank) const {
  const double scale = base_.first_order_scale;
  if (IsIdField(field)) {
    return scale * kEntityScale * std::sqrt(1 - kSegmentShare);
  }
  double variance =
      kFirstOrderScale * kFirstOrderScale * Shrink(rank) * Shrink(rank);
  if (field == kUserSegment || field == kAdSegment) {
    variance += kEntityScale * kEntityScale * kSegmentShare;
  }
  return scale * std::sqrt(variance);
}

double RealisticModel::VectorStddev(int /*field*/, uint32_t rank) const {
  return std::sqrt(std::sqrt(base_.interaction_scale)) * kVectorScale *
         Shrink(rank);
}

double RealisticModel::FirstOrder(int field, uint32_t rank) const {
  const double scale = base_.first_order_scale;
  const uint64_t base = ParamBase(field, rank);
  if (!IsIdField(field)) {
    return scale * kFirstOrderScale * Shrink(rank) *
           UnitVarianceUniform(Mix64(base));
  }
  // An entity's own effect: part shared with its segment, part its own.
  const int segment_field = SegmentOf(field);
  const uint32_t segment = Attribute(segment_field, rank);
  const double shared =
      UnitVarianceUniform(Mix64(ParamBase(segment_field, segment) + 99));
  const double own = UnitVarianceUniform(Mix64(base));
  return scale * kEntityScale *
         (std::sqrt(kSegmentShare) * shared +
          std::sqrt(1 - kSegmentShare) * own);
}

double RealisticModel::Vector(int field, uint32_t rank, int d) const {
  return std::sqrt(std::sqrt(base_.interaction_scale)) * kVectorScale *
         Shrink(rank) *
         UnitVarianceUniform(Mix64(ParamBase(field, rank) + 1 + d));
}

LogitSpread RealisticModel::Terms(const SyntheticRow& row) const {
  LogitSpread terms;
  terms.dense = dense_.Logit(row);
  size_t extra = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    double effect = FirstOrder(f, row.ranks[f]);
    const int count = 1 + row.extra_counts[f];
    for (int k = 1; k < count; ++k) {
      effect += FirstOrder(f, row.extra_ranks[extra++]);
    }
    (IsIdField(f) ? terms.entity : terms.first_order) += effect / count;
  }
  for (const auto& [f, g] : Pairs()) {
    for (int d = 0; d < kVectorDim; ++d) {
      terms.interaction +=
          Vector(f, row.ranks[f], d) * Vector(g, row.ranks[g], d);
    }
  }
  terms.total =
      terms.dense + terms.first_order + terms.entity + terms.interaction;
  return terms;
}

double RealisticModel::Logit(const SyntheticRow& row) const {
  return bias_ + Terms(row).total;
}

uint32_t RealisticModel::HexOf(int field, uint32_t rank) const {
  return fields_.HexOf(field, rank);
}

bool RealisticModel::RankOf(int field, uint32_t hex, uint32_t* rank) const {
  return fields_.RankOf(field, hex, rank);
}

// Sets the bias so that the pilot sample's mean probability is target_ctr,
// and measures the spread of each term on it.
void RealisticModel::Calibrate() {
  std::vector<double> parts[5];
  SyntheticRow row;
  for (int r = 0; r < kPilotRows; ++r) {
    SampleRow(kPilotStream, r, &row);
    const LogitSpread terms = Terms(row);
    parts[0].push_back(terms.dense);
    parts[1].push_back(terms.first_order);
    parts[2].push_back(terms.entity);
    parts[3].push_back(terms.interaction);
    parts[4].push_back(terms.total);
  }
  spread_ = {StandardDeviation(parts[0]), StandardDeviation(parts[1]),
             StandardDeviation(parts[2]), StandardDeviation(parts[3]),
             StandardDeviation(parts[4])};
  bias_ = BiasForMeanProbability(parts[4], base_.target_ctr);
}

}  // namespace strata
