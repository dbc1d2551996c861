#ifndef STRATA_EMBEDDING_INTERNAL_CHECKPOINT_MANIFEST_H_
#define STRATA_EMBEDDING_INTERNAL_CHECKPOINT_MANIFEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "embedding/embedding_store.h"

namespace strata {
namespace embedding_internal {

// INVALID_ARGUMENT unless `id` is 1..128 letters, digits, '_', '-' or '.',
// not starting with '.' (it names a directory).
absl::Status ValidateCheckpointId(absl::string_view id);

// The manifest of a checkpoint: "key=value" lines, global_step and num_rows
// always, parent and delta_rows for an incremental one.
std::string FormatCheckpointManifest(const CheckpointInfo& info);
// Parses what FormatCheckpointManifest wrote, for checkpoint `id`. DATA_LOSS
// naming the checkpoint and the line for anything else: an unknown or
// repeated key, a bad number, a missing field, a bad parent id.
absl::StatusOr<CheckpointInfo> ParseCheckpointManifest(absl::string_view id,
                                                       absl::string_view text);

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_CHECKPOINT_MANIFEST_H_
