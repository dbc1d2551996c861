// libFuzzer target: the cluster file parser (common/cluster_file.h) on any
// text, then the flags each member would get from what it accepted. Every
// input must give a file or an error, never a crash or a hang.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/cluster_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<strata::ClusterFile> cluster =
      strata::ParseClusterFile(text, "fuzz.yaml");
  if (!cluster.ok()) return 0;
  for (strata::ClusterRole role :
       {strata::ClusterRole::kShard, strata::ClusterRole::kServing,
        strata::ClusterRole::kWorker, strata::ClusterRole::kClient}) {
    for (int index = -1; index < 4; ++index) {
      strata::ClusterFlagsFor(*cluster, role, index).status().IgnoreError();
    }
  }
  return 0;
}
