#include "common/table_policy_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "proto/strata.pb.h"

// Help texts say "table" for the table the program creates.
ABSL_FLAG(uint32_t, admit_min_count, 0,
          "Admission: a key gets a row of the table at its Nth push (0 or 1: "
          "at once); earlier gradients are dropped.");
ABSL_FLAG(double, admit_probability, 1,
          "Admission: each push of a key not yet admitted admits it with "
          "this probability, in (0, 1] (1: always).");
ABSL_FLAG(uint32_t, admit_sketch_width, 0,
          "Admission: counters per row of the count-min sketch that counts "
          "pushes per key (0: 262144).");
ABSL_FLAG(uint32_t, admit_sketch_depth, 0,
          "Admission: rows of that count-min sketch (0: 4).");
ABSL_FLAG(uint64_t, evict_after_steps, 0,
          "Eviction: delete rows of the table not updated for N global "
          "steps (0: off).");
ABSL_FLAG(uint64_t, evict_after_seconds, 0,
          "Eviction: delete rows of the table not updated for N seconds (0: "
          "off).");
ABSL_FLAG(double, evict_min_norm, 0,
          "Eviction: delete rows of the table whose L2 norm is under this "
          "(0: off).");
ABSL_FLAG(uint64_t, memory_budget_mb, 0,
          "MiB of the table's rows each shard keeps in memory; the rest stay "
          "on disk only (0: all in memory).");

namespace strata {

void SetTablePoliciesFromFlags(v1::TableConfig& config) {
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

}  // namespace strata
