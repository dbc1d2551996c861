// stratactl create-table: the flags of a table's admission and eviction
// policies (the TableConfig fields of the same names).

#include <cstdint>

#include "absl/flags/flag.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(uint32_t, admit_min_count, 0,
          "create-table: a key gets a row at its Nth push (0 or 1: at once); "
          "earlier gradients are dropped.");
ABSL_FLAG(double, admit_probability, 1,
          "create-table: each push of a key not yet admitted admits it with "
          "this probability, in (0, 1] (1: always).");
ABSL_FLAG(uint32_t, admit_sketch_width, 0,
          "create-table: counters per row of the admission count-min sketch "
          "(0: 262144).");
ABSL_FLAG(uint32_t, admit_sketch_depth, 0,
          "create-table: rows of the admission count-min sketch (0: 4).");
ABSL_FLAG(uint64_t, evict_after_steps, 0,
          "create-table: delete rows not updated for N global steps (0: "
          "off).");
ABSL_FLAG(uint64_t, evict_after_seconds, 0,
          "create-table: delete rows not updated for N seconds (0: off).");
ABSL_FLAG(double, evict_min_norm, 0,
          "create-table: delete rows whose L2 norm is under this (0: off).");

ABSL_FLAG(uint64_t, memory_budget_mb, 0,
          "create-table: MiB of the table's rows each shard keeps in memory; "
          "the rest stay on disk only (0: all in memory).");

namespace strata {
namespace tools_internal {

void SetPoliciesFromFlags(v1::TableConfig& config) {
  // The server validates the values and names a bad field in its answer.
  config.set_admit_min_count(absl::GetFlag(FLAGS_admit_min_count));
  config.set_admit_probability(
      static_cast<float>(absl::GetFlag(FLAGS_admit_probability)));
  config.set_admit_sketch_width(absl::GetFlag(FLAGS_admit_sketch_width));
  config.set_admit_sketch_depth(absl::GetFlag(FLAGS_admit_sketch_depth));
  config.set_evict_after_steps(absl::GetFlag(FLAGS_evict_after_steps));
  config.set_evict_after_seconds(absl::GetFlag(FLAGS_evict_after_seconds));
  config.set_evict_min_norm(
      static_cast<float>(absl::GetFlag(FLAGS_evict_min_norm)));
  config.set_memory_budget_bytes(absl::GetFlag(FLAGS_memory_budget_mb) << 20);
}

}  // namespace tools_internal
}  // namespace strata
