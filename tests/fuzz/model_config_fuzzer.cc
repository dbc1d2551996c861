// libFuzzer target: strata-worker's model config parser
// (worker/training/feature_tables.h) on any text. Every input gives tables
// or an error, never a crash or a hang; tables it accepts hold every field
// exactly once, each named and at most the model's dimension wide.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/training/feature_tables.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int kFields = 26;
  constexpr int kDim = 16;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<strata::FeatureTable>> tables =
      strata::ParseFeatureTables(text, "fuzz.yaml", strata::v1::TableConfig(),
                                 kDim, kFields);
  if (!tables.ok()) return 0;
  std::vector<int> seen(kFields, 0);
  for (const strata::FeatureTable& table : *tables) {
    if (table.name.empty() || table.config.name() != table.name ||
        table.config.dim() < 1 || table.config.dim() > kDim) {
      __builtin_trap();
    }
    for (int field : table.fields) {
      if (field < 0 || field >= kFields || ++seen[field] != 1) {
        __builtin_trap();
      }
    }
  }
  for (int count : seen) {
    if (count != 1) __builtin_trap();
  }
  return 0;
}
