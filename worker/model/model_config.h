#ifndef STRATA_WORKER_MODEL_MODEL_CONFIG_H_
#define STRATA_WORKER_MODEL_MODEL_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// The shape of the DLRM-style click model (Naumov et al., 2019):
//
//   bottom = MLP_bottom(dense features)                 -> embedding_dim
//   e_f    = pool(embedding rows of field f)            -> embedding_dim
//   z      = interaction(bottom, e_1 .. e_F)
//   logit  = MLP_top(z)                                 -> 1
//   loss   = sigmoid cross-entropy(logit, label)
//
// Every MLP layer but the last top layer is followed by a ReLU (the bottom
// MLP's last layer too, as in DLRM). Interactions:
//   kDot:    z = [bottom, <v_i, v_j> for i < j over v = (bottom, e_1..e_F)]
//   kConcat: z = [bottom, e_1, .., e_F]
// Pooling of a multi-hot field: kSum or kMean of its rows (an empty field
// pools to zeros).
enum class Interaction { kDot, kConcat };
enum class Pooling { kSum, kMean };

struct ModelConfig {
  int num_dense = 13;      // dense (integer) features per example
  int num_fields = 26;     // categorical fields per example
  int embedding_dim = 16;  // per field; also the bottom MLP's output
  // Hidden widths; the bottom MLP ends with a layer of width embedding_dim
  // and the top MLP with a layer of width 1, both added implicitly.
  std::vector<int> bottom_hidden = {64};
  std::vector<int> top_hidden = {128, 64};
  Interaction interaction = Interaction::kDot;
  Pooling pooling = Pooling::kSum;
  // Seed of the initial dense parameters; every rank given the same seed
  // starts from the same parameters.
  uint64_t seed = 1;
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateModelConfig(const ModelConfig& config);

// "dot" / "concat" and "sum" / "mean"; INVALID_ARGUMENT for other names.
absl::StatusOr<Interaction> ParseInteraction(absl::string_view name);
absl::StatusOr<Pooling> ParsePooling(absl::string_view name);
const char* InteractionName(Interaction interaction);
const char* PoolingName(Pooling pooling);

// A fully connected layer y = x W + b with W stored row-major as
// [inputs x outputs] at `weight_offset` of the flat parameter vector and b
// (outputs) right after it.
struct DenseLayer {
  int inputs = 0;
  int outputs = 0;
  size_t weight_offset = 0;
  size_t bias_offset = 0;
  bool relu = true;
};

// The layout of all dense parameters in one flat float vector: bottom layers
// first, then top layers. This is also the layout of the dense gradient that
// ranks allreduce and of the dense part of a checkpoint.
struct DenseLayout {
  std::vector<DenseLayer> bottom;
  std::vector<DenseLayer> top;
  int interaction_width = 0;  // inputs of the first top layer
  size_t num_parameters = 0;
};

// REQUIRES: ValidateModelConfig(config) is OK.
DenseLayout MakeDenseLayout(const ModelConfig& config);

// Initial dense parameters: weights uniform in +-sqrt(6 / (in + out))
// (Glorot), biases zero; a pure function of config (seed included).
std::vector<float> InitialDenseParameters(const ModelConfig& config);

// One line describing the shape, for logs: "dense 13 -> 64 -> 16, 26 fields
// x 16 (sum), dot (367) -> 128 -> 64 -> 1, 57,361 parameters".
std::string DescribeModel(const ModelConfig& config);

}  // namespace strata

#endif  // STRATA_WORKER_MODEL_MODEL_CONFIG_H_
