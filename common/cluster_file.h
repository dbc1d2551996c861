#ifndef STRATA_COMMON_CLUSTER_FILE_H_
#define STRATA_COMMON_CLUSTER_FILE_H_

// The cluster file: one YAML document naming the training shards, the serving
// PS and the workers of a cluster, with the flags of each. Every daemon can
// take its settings from it (--cluster_file; flags on the command line
// override), and deploy/local starts the cluster it describes.
//
//   version: 1
//   etcd:                          # only for replicated shards
//     endpoints: [127.0.0.1:2379]
//   shards:
//     addresses: [127.0.0.1:50051, 127.0.0.1:50052]  # shard i at entry i
//     # replicated: entry i lists shard i's replicas (1 to 3, the same
//     # number for every shard), e.g. [[h:50051, h:50061], [h:50052, h:50062]]
//     flags: {durability: group, data_dir: "shard-{index}"}
//     member_flags:                 # optional, entry i for shard i
//       - {metrics_port: 9090}
//       - {metrics_port: 9091}
//   serving:
//     addresses: [127.0.0.1:50061]
//     flags: {data_dir: serving}
//   workers:
//     count: 2
//     flags: {train_files: data/train, batch_size: 256}
//
// Flag values are YAML scalars or lists of scalars (joined with commas);
// "{index}" in a value becomes the member's index, "{replica}" a replicated
// shard's replica index (0 otherwise).

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// Flags in file order, as name and value.
using ClusterFlagList = std::vector<std::pair<std::string, std::string>>;

// One kind of member: the shards, the serving PS or the workers.
struct ClusterGroup {
  bool present = false;
  // host:port; empty for workers. A replicated shard's entry joins its
  // replicas with '|' (the form clients take).
  std::vector<std::string> addresses;
  // shards only: entry i lists shard i's replicas (one when not replicated).
  std::vector<std::vector<std::string>> replicas;
  int count = 0;          // addresses.size(), or workers.count
  ClusterFlagList flags;  // every member
  std::vector<ClusterFlagList> member_flags;  // entry i: member i only
};

struct ClusterFile {
  std::string path;
  ClusterGroup shards;
  ClusterGroup serving;
  ClusterGroup workers;
  // host:port of etcd; required when shards have replicas.
  std::vector<std::string> etcd_endpoints;
};

// Which program asks: it decides which group's flags apply and which flags
// are derived from the rest of the file.
enum class ClusterRole {
  kShard,    // strata-server: index = --shard_index
  kServing,  // strata-serving
  kWorker,   // strata-worker: index = --rank
  kClient,   // stratactl: --shards and --serving only
};

// Parses a cluster file's text; `path` only names it in errors.
// INVALID_ARGUMENT naming the field for anything malformed.
absl::StatusOr<ClusterFile> ParseClusterFile(absl::string_view text,
                                             absl::string_view path);
// Reads and parses `path`. NOT_FOUND when it cannot be read.
absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& path);

// The flags member `index` of `role` gets from the file, as "--name=value":
// first those derived from the file (the shard list, counts, the port of the
// member's address; for a replicated shard, replica `replica`'s port, id,
// address and etcd), then the group's flags, then the member's own.
// INVALID_ARGUMENT when the file has no such member.
absl::StatusOr<std::vector<std::string>> ClusterFlagsFor(
    const ClusterFile& cluster, ClusterRole role, int index, int replica = 0);

}  // namespace strata

#endif  // STRATA_COMMON_CLUSTER_FILE_H_
