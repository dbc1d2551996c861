#ifndef STRATA_EMBEDDING_TABLE_CONFIG_H_
#define STRATA_EMBEDDING_TABLE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

using FeatureId = uint64_t;
using TableId = uint32_t;

enum class InitializerType { kZeros, kConstant, kUniform, kTruncatedNormal };
enum class OptimizerType { kSgd, kAdagrad, kAdam, kFtrl };

struct InitializerConfig {
  InitializerType type = InitializerType::kZeros;
  float value = 0.0f;    // kConstant
  float min = -0.05f;    // kUniform
  float max = 0.05f;     // kUniform
  float mean = 0.0f;     // kTruncatedNormal
  float stddev = 0.05f;  // kTruncatedNormal, cut at two standard deviations
};

// Hyper-parameters. Defaults follow the usual published values.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdagrad;
  float learning_rate = 0.01f;
  float initial_accumulator = 0.1f;  // Adagrad
  float epsilon = 1e-7f;             // Adagrad, Adam
  float beta1 = 0.9f;                // Adam
  float beta2 = 0.999f;              // Adam
  float ftrl_beta = 1.0f;            // FTRL-Proximal
  float l1 = 0.0f;                   // FTRL-Proximal
  float l2 = 0.0f;                   // FTRL-Proximal
};

// Everything that defines a table; identical configs make CreateTable
// idempotent, different ones make it fail.
struct EmbeddingTableConfig {
  std::string name;
  uint32_t dim = 0;
  InitializerConfig initializer;
  OptimizerConfig optimizer;
  uint64_t seed = 0;
};

inline constexpr uint32_t kMaxTableDim = 4096;
inline constexpr size_t kMaxTableNameLength = 128;

// INVALID_ARGUMENT naming the offending field, or OK.
absl::Status ValidateTableConfig(const EmbeddingTableConfig& config);

bool SameTableConfig(const EmbeddingTableConfig& a,
                     const EmbeddingTableConfig& b);

// A one-line, human-readable and parseable form ("name=t dim=8 ...").
std::string SerializeTableConfig(const EmbeddingTableConfig& config);
absl::StatusOr<EmbeddingTableConfig> ParseTableConfig(absl::string_view text);

absl::string_view OptimizerName(OptimizerType type);
absl::string_view InitializerName(InitializerType type);
absl::StatusOr<OptimizerType> ParseOptimizerName(absl::string_view name);
absl::StatusOr<InitializerType> ParseInitializerName(absl::string_view name);

// Floats of optimizer state kept per row for a table of dimension `dim`.
uint32_t OptimizerStateDim(OptimizerType type, uint32_t dim);

}  // namespace strata

#endif  // STRATA_EMBEDDING_TABLE_CONFIG_H_
