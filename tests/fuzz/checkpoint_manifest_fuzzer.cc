// libFuzzer target: the checkpoint manifest parser
// (embedding/internal/checkpoint_manifest.h). Every input gives a checkpoint
// or DATA_LOSS; what it accepts formats back to something it accepts with
// the same fields.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "embedding/internal/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  namespace internal = strata::embedding_internal;
  absl::StatusOr<strata::CheckpointInfo> info =
      internal::ParseCheckpointManifest("fuzz", text);
  if (!info.ok()) {
    if (!absl::IsDataLoss(info.status())) __builtin_trap();
    return 0;
  }
  absl::StatusOr<strata::CheckpointInfo> again =
      internal::ParseCheckpointManifest(
          "fuzz", internal::FormatCheckpointManifest(*info));
  if (!again.ok() || again->global_step != info->global_step ||
      again->num_rows != info->num_rows ||
      again->parent_id != info->parent_id ||
      again->delta_rows != info->delta_rows) {
    __builtin_trap();
  }
  return 0;
}
