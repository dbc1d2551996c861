#include "worker/model/model_config.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"

namespace strata {
namespace {

constexpr int kMaxWidth = 1 << 16;

absl::Status ValidateWidths(const std::vector<int>& widths,
                            absl::string_view name) {
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1 || widths[i] > kMaxWidth) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "[", i, "] = ", widths[i], " is not in 1..", kMaxWidth));
    }
  }
  return absl::OkStatus();
}

// Appends layers in -> widths... -> last to `layers`, advancing `offset`.
void AppendLayers(int inputs, const std::vector<int>& hidden, int last,
                  bool last_relu, size_t* offset,
                  std::vector<DenseLayer>* layers) {
  std::vector<int> widths = hidden;
  widths.push_back(last);
  for (size_t i = 0; i < widths.size(); ++i) {
    DenseLayer layer;
    layer.inputs = inputs;
    layer.outputs = widths[i];
    layer.weight_offset = *offset;
    layer.bias_offset = *offset + static_cast<size_t>(inputs) * widths[i];
    layer.relu = (i + 1 < widths.size()) || last_relu;
    *offset = layer.bias_offset + widths[i];
    layers->push_back(layer);
    inputs = widths[i];
  }
}

// Uniform in [0, 1) from a 64-bit hash.
double UnitFromHash(uint64_t h) { return (h >> 11) * (1.0 / (1ull << 53)); }

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.num_dense < 1 || config.num_dense > kMaxWidth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_dense = ", config.num_dense, " is not in 1..", kMaxWidth));
  }
  if (config.num_fields < 1 || config.num_fields > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_fields = ", config.num_fields, " is not in 1..1024"));
  }
  if (config.embedding_dim < 1 || config.embedding_dim > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding_dim = ", config.embedding_dim, " is not in 1..1024"));
  }
  if (absl::Status s = ValidateWidths(config.bottom_hidden, "bottom_hidden");
      !s.ok()) {
    return s;
  }
  return ValidateWidths(config.top_hidden, "top_hidden");
}

absl::StatusOr<Interaction> ParseInteraction(absl::string_view name) {
  if (name == "dot") return Interaction::kDot;
  if (name == "concat") return Interaction::kConcat;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown interaction \"", name, "\" (want dot or concat)"));
}

absl::StatusOr<Pooling> ParsePooling(absl::string_view name) {
  if (name == "sum") return Pooling::kSum;
  if (name == "mean") return Pooling::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pooling \"", name, "\" (want sum or mean)"));
}

const char* InteractionName(Interaction interaction) {
  return interaction == Interaction::kDot ? "dot" : "concat";
}

const char* PoolingName(Pooling pooling) {
  return pooling == Pooling::kSum ? "sum" : "mean";
}

DenseLayout MakeDenseLayout(const ModelConfig& config) {
  DenseLayout layout;
  size_t offset = 0;
  AppendLayers(config.num_dense, config.bottom_hidden, config.embedding_dim,
               /*last_relu=*/true, &offset, &layout.bottom);
  const int vectors = config.num_fields + 1;
  layout.interaction_width =
      config.interaction == Interaction::kDot
          ? config.embedding_dim + vectors * (vectors - 1) / 2
          : config.embedding_dim * vectors;
  AppendLayers(layout.interaction_width, config.top_hidden, 1,
               /*last_relu=*/false, &offset, &layout.top);
  layout.num_parameters = offset;
  return layout;
}

std::vector<float> InitialDenseParameters(const ModelConfig& config) {
  const DenseLayout layout = MakeDenseLayout(config);
  std::vector<float> parameters(layout.num_parameters, 0.0f);
  const uint64_t seed = Mix64(config.seed ^ 0x6d6f64656c696e69ull);
  auto init = [&](const DenseLayer& layer) {
    const double limit = std::sqrt(6.0 / (layer.inputs + layer.outputs));
    const size_t count = static_cast<size_t>(layer.inputs) * layer.outputs;
    for (size_t i = 0; i < count; ++i) {
      const size_t index = layer.weight_offset + i;
      const double u = UnitFromHash(Mix64(seed + index));
      parameters[index] = static_cast<float>((2 * u - 1) * limit);
    }
  };
  for (const DenseLayer& layer : layout.bottom) init(layer);
  for (const DenseLayer& layer : layout.top) init(layer);
  return parameters;
}

std::string DescribeModel(const ModelConfig& config) {
  const DenseLayout layout = MakeDenseLayout(config);
  std::vector<int> bottom = {config.num_dense};
  for (const DenseLayer& layer : layout.bottom) bottom.push_back(layer.outputs);
  std::vector<int> top = {layout.interaction_width};
  for (const DenseLayer& layer : layout.top) top.push_back(layer.outputs);
  return absl::StrFormat(
      "dense %s, %d fields x %d (%s), %s %s, %d dense parameters",
      absl::StrJoin(bottom, " -> "), config.num_fields, config.embedding_dim,
      PoolingName(config.pooling), InteractionName(config.interaction),
      absl::StrJoin(top, " -> "), layout.num_parameters);
}

}  // namespace strata
