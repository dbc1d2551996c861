#include "worker/model/dense_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr char kStateMagic[8] = {'S', 'D', 'O', 'P', 'T', '0', '0', '1'};

}  // namespace

absl::StatusOr<DenseOptimizerConfig::Kind> ParseDenseOptimizerKind(
    absl::string_view name) {
  if (name == "adam") return DenseOptimizerConfig::Kind::kAdam;
  if (name == "adagrad") return DenseOptimizerConfig::Kind::kAdagrad;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dense optimizer \"", name, "\" (want adam or adagrad)"));
}

absl::StatusOr<DenseOptimizerConfig::Schedule> ParseLearningRateSchedule(
    absl::string_view name) {
  if (name == "constant") return DenseOptimizerConfig::Schedule::kConstant;
  if (name == "rsqrt") return DenseOptimizerConfig::Schedule::kInverseSqrt;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning rate schedule \"", name,
                   "\" (want constant or rsqrt)"));
}

float ScheduledLearningRate(const DenseOptimizerConfig& config, int64_t step) {
  const double t = static_cast<double>(std::max<int64_t>(step, 1));
  const double warmup = static_cast<double>(config.warmup_steps);
  double scale = 1.0;
  if (warmup > 0 && t < warmup) scale = t / warmup;
  if (config.schedule == DenseOptimizerConfig::Schedule::kInverseSqrt &&
      t > std::max(warmup, 1.0)) {
    scale = std::sqrt(std::max(warmup, 1.0) / t);
  }
  return static_cast<float>(config.learning_rate * scale);
}

absl::StatusOr<std::unique_ptr<DenseOptimizer>> DenseOptimizer::Create(
    const DenseOptimizerConfig& config, size_t num_parameters) {
  if (!(config.learning_rate > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense learning rate ", config.learning_rate, " is not positive"));
  }
  if (!(config.beta1 >= 0 && config.beta1 < 1) ||
      !(config.beta2 >= 0 && config.beta2 < 1)) {
    return absl::InvalidArgumentError("Adam betas must be in [0, 1)");
  }
  if (config.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup_steps ", config.warmup_steps, " is negative"));
  }
  if (!(config.epsilon > 0) || !(config.initial_accumulator >= 0)) {
    return absl::InvalidArgumentError(
        "epsilon must be positive and initial_accumulator non-negative");
  }
  return std::unique_ptr<DenseOptimizer>(
      new DenseOptimizer(config, num_parameters));
}

DenseOptimizer::DenseOptimizer(const DenseOptimizerConfig& config,
                               size_t num_parameters)
    : config_(config) {
  if (config.kind == DenseOptimizerConfig::Kind::kAdam) {
    first_.assign(num_parameters, 0.0f);
    second_.assign(num_parameters, 0.0f);
  } else {
    first_.assign(num_parameters, config.initial_accumulator);
  }
}

absl::Status DenseOptimizer::Apply(absl::Span<const float> gradients,
                                   absl::Span<float> parameters) {
  if (gradients.size() != first_.size() || parameters.size() != first_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense optimizer holds ", first_.size(), " values, got ",
        gradients.size(), " gradients and ", parameters.size(), " parameters"));
  }
  ++steps_;
  const size_t n = first_.size();
  const float lr = ScheduledLearningRate(config_, steps_);
  if (config_.kind == DenseOptimizerConfig::Kind::kAdagrad) {
    for (size_t i = 0; i < n; ++i) {
      const float g = gradients[i];
      first_[i] += g * g;
      parameters[i] -= lr * g / (std::sqrt(first_[i]) + 1e-10f);
    }
    return absl::OkStatus();
  }
  const float b1 = config_.beta1;
  const float b2 = config_.beta2;
  // Bias corrections folded into the step size (Kingma & Ba, section 2).
  const double t = static_cast<double>(steps_);
  const float step = static_cast<float>(lr * std::sqrt(1 - std::pow(b2, t)) /
                                        (1 - std::pow(b1, t)));
  const float eps = config_.epsilon;
  for (size_t i = 0; i < n; ++i) {
    const float g = gradients[i];
    first_[i] = b1 * first_[i] + (1 - b1) * g;
    second_[i] = b2 * second_[i] + (1 - b2) * g * g;
    parameters[i] -= step * first_[i] / (std::sqrt(second_[i]) + eps);
  }
  return absl::OkStatus();
}

std::string DenseOptimizer::SerializeState() const {
  std::string blob(kStateMagic, sizeof(kStateMagic));
  const uint64_t header[3] = {static_cast<uint64_t>(config_.kind),
                              static_cast<uint64_t>(steps_), first_.size()};
  blob.append(reinterpret_cast<const char*>(header), sizeof(header));
  blob.append(reinterpret_cast<const char*>(first_.data()),
              first_.size() * sizeof(float));
  blob.append(reinterpret_cast<const char*>(second_.data()),
              second_.size() * sizeof(float));
  return blob;
}

absl::Status DenseOptimizer::RestoreState(absl::string_view blob) {
  uint64_t header[3];
  if (blob.size() < sizeof(kStateMagic) + sizeof(header) ||
      std::memcmp(blob.data(), kStateMagic, sizeof(kStateMagic)) != 0) {
    return absl::DataLossError("dense optimizer state: bad header");
  }
  std::memcpy(header, blob.data() + sizeof(kStateMagic), sizeof(header));
  if (header[0] != static_cast<uint64_t>(config_.kind) ||
      header[2] != first_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense optimizer state is for another optimizer or model (kind ",
        header[0], ", ", header[2], " values; this one has ", first_.size(),
        ")"));
  }
  const size_t values = first_.size() + second_.size();
  const size_t body = sizeof(kStateMagic) + sizeof(header);
  if (blob.size() != body + values * sizeof(float)) {
    return absl::DataLossError("dense optimizer state: wrong size");
  }
  steps_ = static_cast<int64_t>(header[1]);
  std::memcpy(first_.data(), blob.data() + body, first_.size() * sizeof(float));
  std::memcpy(second_.data(),
              blob.data() + body + first_.size() * sizeof(float),
              second_.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace strata
