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

// Which keys get a row. Until a key is admitted, pushes of it are dropped
// (and counted); pulls of it return the initializer's value, as for any key
// without a row. A key that has a row is always admitted.
struct AdmissionConfig {
  // A key is admitted at its min_count-th sighting (a push holding it),
  // counted in a count-min sketch. 0 or 1: no count needed.
  uint32_t min_count = 0;
  // Each sighting (from min_count on) admits the key with this probability,
  // drawn from a hash of (seed, key, sighting count) so that runs repeat.
  // In (0, 1]; 1: always.
  float probability = 1.0f;
  // Counters per row and rows of the sketch; 0 takes the defaults
  // (kDefaultSketchWidth, kDefaultSketchDepth: 4 MiB).
  uint32_t sketch_width = 0;
  uint32_t sketch_depth = 0;
};

// Which rows a background sweep deletes; each non-zero criterion evicts on
// its own. A deleted row is gone from memory, disk and the serving PS.
struct EvictionConfig {
  // Rows not updated for this many global steps (pushes carry the trainer's
  // step). 0: off.
  uint64_t after_steps = 0;
  // Rows not updated for this many seconds. 0: off.
  uint64_t after_seconds = 0;
  // Rows whose value has an L2 norm under this. 0: off.
  float min_norm = 0.0f;
};

// Everything that defines a table; identical configs make CreateTable
// idempotent, different ones make it fail.
struct EmbeddingTableConfig {
  std::string name;
  uint32_t dim = 0;
  InitializerConfig initializer;
  OptimizerConfig optimizer;
  uint64_t seed = 0;
  AdmissionConfig admission;
  EvictionConfig eviction;
  // Bytes of rows the shard keeps in memory for this table; the rest live
  // only in RocksDB (the cold tier) and are read from it when pulled or
  // pushed. 0: every row in memory.
  uint64_t memory_budget_bytes = 0;
};

// The smallest non-zero memory budget of a table.
inline constexpr uint64_t kMinMemoryBudgetBytes = uint64_t{1} << 20;
// Largest magnitudes a config may hold (ValidateTableConfig): past them rows
// overflow float32 within few pushes.
inline constexpr float kMaxInitialMagnitude = 1e4f;
inline constexpr float kMaxLearningRate = 1e3f;
inline constexpr float kMaxAccumulator = 1e10f;
inline constexpr float kMaxRegularization = 1e6f;

inline constexpr uint32_t kMaxTableDim = 4096;
inline constexpr size_t kMaxTableNameLength = 128;
inline constexpr uint32_t kDefaultSketchWidth = uint32_t{1} << 18;
inline constexpr uint32_t kDefaultSketchDepth = 4;
inline constexpr uint32_t kMaxSketchWidth = uint32_t{1} << 26;
inline constexpr uint32_t kMaxSketchDepth = 16;
inline constexpr uint32_t kMaxAdmitMinCount = 1u << 20;

// True when admission needs a sketch of sightings.
inline bool CountsSightings(const AdmissionConfig& admission) {
  return admission.min_count > 1 || admission.probability < 1.0f;
}
inline bool Evicts(const EvictionConfig& eviction) {
  return eviction.after_steps > 0 || eviction.after_seconds > 0 ||
         eviction.min_norm > 0.0f;
}

// INVALID_ARGUMENT naming the offending field, or OK.
absl::Status ValidateTableConfig(const EmbeddingTableConfig& config);

bool SameTableConfig(const EmbeddingTableConfig& a,
                     const EmbeddingTableConfig& b);

// A one-line, human-readable and parseable form ("name=t dim=8 ...").
std::string SerializeTableConfig(const EmbeddingTableConfig& config);
// The fields in which `requested` differs from `existing`, as
// "dim=8 (asked 16), lr=0.05 (asked 0.1)"; empty when they are the same.
std::string TableConfigDifference(const EmbeddingTableConfig& existing,
                                  const EmbeddingTableConfig& requested);
absl::StatusOr<EmbeddingTableConfig> ParseTableConfig(absl::string_view text);

absl::string_view OptimizerName(OptimizerType type);
absl::string_view InitializerName(InitializerType type);
absl::StatusOr<OptimizerType> ParseOptimizerName(absl::string_view name);
absl::StatusOr<InitializerType> ParseInitializerName(absl::string_view name);

// Floats of optimizer state kept per row for a table of dimension `dim`.
uint32_t OptimizerStateDim(OptimizerType type, uint32_t dim);

}  // namespace strata

#endif  // STRATA_EMBEDDING_TABLE_CONFIG_H_
