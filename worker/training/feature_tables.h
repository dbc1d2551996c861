#ifndef STRATA_WORKER_TRAINING_FEATURE_TABLES_H_
#define STRATA_WORKER_TRAINING_FEATURE_TABLES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/strata.pb.h"

namespace strata {

class FileSystem;

// One PS table of the model's embeddings and the categorical fields whose
// rows it holds (0-based: field 0 is Criteo's C1).
struct FeatureTable {
  std::string name;
  v1::TableConfig config;  // name and dim filled in
  std::vector<int> fields;
};

// Parses strata-worker's model config file (--model_config), which groups
// the categorical fields into PS tables, each with its own optimizer,
// initializer, admission, eviction and memory budget:
//
//   tables:
//     - name: user_features
//       fields: [C1-C10]          # names C1..C26, or ranges of them
//       optimizer: adagrad        # sgd, adagrad, adam or ftrl
//       learning_rate: 0.2
//       initial_accumulator: 0.1  # adagrad
//       init_stddev: 0.01         # truncated normal
//       admit_min_count: 2
//       memory_budget_mb: 256
//     - name: ad_features
//       fields: [C11-C20]
//     - name: context_features
//       fields: [C21, C22, C23, C24, C25, C26]
//
// Every field of 1..num_fields is in exactly one table. A key a table does
// not set keeps its value in `defaults` (the worker's flags; a table that
// switches to Adagrad takes the initial accumulator from there, one that
// leaves Adagrad drops it): the other keys
// are dim (1 to `embedding_dim`, which is also the default: a narrower
// table's rows enter the interaction zero-padded to the model's width, so
// they cost the PS, the network and the optimizer state only their own
// width), admit_probability, admit_sketch_width,
// admit_sketch_depth, evict_after_steps, evict_after_seconds and
// evict_min_norm. INVALID_ARGUMENT naming the file and the field at fault
// (an unknown key, a field in two tables or in none, a repeated name, a bad
// number); the server checks the values' ranges when it creates the table.
absl::StatusOr<std::vector<FeatureTable>> ParseFeatureTables(
    absl::string_view text, absl::string_view path,
    const v1::TableConfig& defaults, int embedding_dim, int num_fields);

// "sgd", "adagrad", "adam" or "ftrl" (the names of the worker's flags and of
// a model config); INVALID_ARGUMENT naming the others.
absl::StatusOr<v1::OptimizerType> ParseOptimizerType(absl::string_view name);

// A model config file larger than this is refused unread.
inline constexpr size_t kMaxModelConfigBytes = 1 << 20;

// Reads the file at `path` through `fs`, then as ParseFeatureTables; the
// file system's error (NOT_FOUND, PERMISSION_DENIED, ...) naming the file
// when it cannot be read, INVALID_ARGUMENT when it is over
// kMaxModelConfigBytes.
absl::StatusOr<std::vector<FeatureTable>> ReadFeatureTables(
    FileSystem* fs, const std::string& path, const v1::TableConfig& defaults,
    int embedding_dim, int num_fields);

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_FEATURE_TABLES_H_
