#include "embedding/internal/checkpoint_manifest.h"

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata {
namespace embedding_internal {

absl::Status ValidateCheckpointId(absl::string_view id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint id '", id,
                     "' must be 1..128 characters, not starting "
                     "with '.'"));
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint id '", id,
                       "' may only hold letters, digits, '_', '-' "
                       "and '.'"));
    }
  }
  return absl::OkStatus();
}

std::string FormatCheckpointManifest(const CheckpointInfo& info) {
  std::string manifest = absl::StrCat("global_step=", info.global_step,
                                      "\nnum_rows=", info.num_rows, "\n");
  if (!info.parent_id.empty()) {
    absl::StrAppend(&manifest, "parent=", info.parent_id,
                    "\ndelta_rows=", info.delta_rows, "\n");
  }
  return manifest;
}

absl::StatusOr<CheckpointInfo> ParseCheckpointManifest(absl::string_view id,
                                                       absl::string_view text) {
  CheckpointInfo info;
  info.checkpoint_id = std::string(id);
  auto corrupt = [id](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", id, "' has a corrupt manifest: ", why));
  };
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) {
      return corrupt(
          absl::StrCat("line '", line.substr(0, 64), "' is not key=value"));
    }
    const absl::string_view key = line.substr(0, equals);
    const absl::string_view value = line.substr(equals + 1);
    if (!seen.insert(std::string(key)).second) {
      return corrupt(absl::StrCat("'", key, "' appears twice"));
    }
    bool parsed = true;
    if (key == "global_step") {
      parsed = absl::SimpleAtoi(value, &info.global_step);
    } else if (key == "num_rows") {
      parsed = absl::SimpleAtoi(value, &info.num_rows);
    } else if (key == "delta_rows") {
      parsed = absl::SimpleAtoi(value, &info.delta_rows);
    } else if (key == "parent") {
      info.parent_id = std::string(value);
      parsed = ValidateCheckpointId(value).ok() && value != id;
    } else {
      return corrupt(absl::StrCat("unknown key '", key.substr(0, 64), "'"));
    }
    if (!parsed) {
      return corrupt(
          absl::StrCat("bad value '", value.substr(0, 64), "' of ", key));
    }
  }
  for (const char* required : {"global_step", "num_rows"}) {
    if (!seen.contains(required)) {
      return corrupt(absl::StrCat("no ", required));
    }
  }
  if (seen.contains("parent") != seen.contains("delta_rows")) {
    return corrupt("parent and delta_rows come together");
  }
  return info;
}

}  // namespace embedding_internal
}  // namespace strata
