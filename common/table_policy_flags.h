#ifndef STRATA_COMMON_TABLE_POLICY_FLAGS_H_
#define STRATA_COMMON_TABLE_POLICY_FLAGS_H_

// The flags of a table's admission, eviction and memory budget (the
// TableConfig fields of the same names), defined once so that they mean the
// same in every program that creates tables (stratactl create-table,
// strata-worker): --admit_min_count, --admit_probability,
// --admit_sketch_width, --admit_sketch_depth, --evict_after_steps,
// --evict_after_seconds, --evict_min_norm and --memory_budget_mb.

namespace strata {
namespace v1 {
class TableConfig;
}  // namespace v1

// Sets those fields of `config` from the flags. The server validates the
// values and names a bad field in its answer.
void SetTablePoliciesFromFlags(v1::TableConfig& config);

}  // namespace strata

#endif  // STRATA_COMMON_TABLE_POLICY_FLAGS_H_
