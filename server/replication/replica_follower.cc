// The follower side of a replica group: applying the primary's entries and
// installing its snapshots; and the primary's snapshot taking.

#include <bitset>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/sync_stream.h"
#include "server/internal/moved_rows.h"
#include "server/internal/push_batches.h"
#include "server/replication/position_proto.h"
#include "server/replication/replica_group.h"
#include "server/table_config_proto.h"

namespace strata {
namespace {

// Where the store keeps its checkpoints (embedding/internal/rocksdb_files.h:
// checkpoint <id> is <data_dir>/checkpoints/<id>): snapshots are taken and
// installed as checkpoints.
std::filesystem::path CheckpointsDir(const std::string& data_dir) {
  return std::filesystem::path(data_dir) / "checkpoints";
}

std::string SnapshotId(const ReplicationPosition& position) {
  return absl::StrCat("replica-snapshot-", position.term, "-",
                      position.sequence);
}

// A file name of a checkpoint: no directory part, nothing that leaves it.
absl::Status CheckSnapshotFileName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot file name '", name, "' is not a plain name"));
  }
  return absl::OkStatus();
}

absl::Status AppendToFile(const std::string& path, const std::string& data) {
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("cannot open ", path));
  }
  const size_t written = std::fwrite(data.data(), 1, data.size(), file);
  const bool closed = std::fclose(file) == 0;
  if (written != data.size() || !closed) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReplicaGroup::ApplyEntry(const v1::ReplicationEntry& entry) {
  const ReplicationPosition position{entry.term(), entry.sequence()};
  if (entry.has_push()) {
    const v1::PushRequest& push = entry.push();
    std::vector<std::vector<float>> decoded;
    uint64_t keys = 0;
    STRATA_ASSIGN_OR_RETURN(
        std::vector<GradientBatch> batches,
        server_internal::DecodePushBatches(push, decoded, keys));
    STRATA_ASSIGN_OR_RETURN(
        const bool duplicate,
        options_.store->ApplyGradients(
            batches, PushId{push.client_id(), push.sequence(), position}));
    // A duplicate wrote nothing, its position included.
    if (!duplicate) return absl::OkStatus();
  } else if (entry.has_create_table()) {
    STRATA_ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                            TableConfigFromProto(entry.create_table()));
    STRATA_RETURN_IF_ERROR(options_.store->CreateTable(config).status());
  } else if (entry.has_moved_rows()) {
    STRATA_RETURN_IF_ERROR(
        server_internal::WriteMovedRows(*options_.store, entry.moved_rows()));
  } else if (entry.has_dropped_buckets()) {
    std::bitset<kNumBuckets> buckets;
    for (uint32_t bucket : entry.dropped_buckets().buckets()) {
      if (bucket >= kNumBuckets) {
        return absl::InvalidArgumentError(
            absl::StrCat("replication entry ", entry.sequence(),
                         " drops bucket ", bucket, ", out of range"));
      }
      buckets[bucket] = true;
    }
    STRATA_RETURN_IF_ERROR(
        server_internal::DropRowsOfBuckets(*options_.store, buckets).status());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication entry ", entry.sequence(), " holds no update"));
  }
  return options_.store->RecordReplicationPosition(position);
}

absl::StatusOr<v1::AppendResponse> ReplicaGroup::HandleAppend(
    const v1::AppendRequest& request) {
  v1::AppendResponse response;
  bool deposed;
  {
    absl::MutexLock lock(&mu_);
    if (request.term() < highest_term_) {
      response.set_highest_term(highest_term_);
      PositionToProto(log_.last(), response.mutable_position());
      return response;
    }
    highest_term_ = request.term();
    deposed = primary_ && request.term() > term_;
    primary_id_ = request.primary_id();
    primary_address_ = request.primary_address();
  }
  if (deposed) StepDown("a newer primary sends its log");
  if (IsPrimaryOf(request.term())) {
    return absl::FailedPreconditionError(
        "a replica was sent its own term's log");
  }
  response.set_highest_term(request.term());
  absl::MutexLock order(&apply_mu_);
  ReplicationPosition mine = log_.last();
  const ReplicationPosition previous = PositionFromProto(request.previous());
  if (previous != mine && previous.sequence >= mine.sequence) {
    response.set_needs_snapshot(true);
    PositionToProto(mine, response.mutable_position());
    return response;
  }
  for (const v1::ReplicationEntry& entry : request.entries()) {
    if (entry.sequence() <= mine.sequence) {
      // Sent again (an answer was lost): it must be the entry applied.
      if (entry.sequence() == mine.sequence && entry.term() != mine.term) {
        response.set_needs_snapshot(true);
        break;
      }
      continue;
    }
    if (entry.sequence() != mine.sequence + 1) {
      response.set_needs_snapshot(true);
      break;
    }
    STRATA_RETURN_IF_ERROR(ApplyEntry(entry));
    log_.Append(std::make_shared<v1::ReplicationEntry>(entry));
    mine = ReplicationPosition{entry.term(), entry.sequence()};
  }
  PositionToProto(mine, response.mutable_position());
  return response;
}

absl::StatusOr<v1::InstallSnapshotResponse> ReplicaGroup::HandleInstallSnapshot(
    grpc::ServerReaderInterface<v1::SnapshotChunk>* reader) {
  v1::SnapshotChunk chunk;
  if (!reader->Read(&chunk)) {
    return absl::InvalidArgumentError("an empty snapshot stream");
  }
  {
    absl::MutexLock lock(&mu_);
    if (chunk.term() < highest_term_ || (primary_ && chunk.term() <= term_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("snapshot of term ", chunk.term(), " refused: replica ",
                       options_.replica_id, " has seen term ", highest_term_));
    }
    highest_term_ = chunk.term();
    primary_id_ = chunk.primary_id();
    primary_address_ = chunk.primary_address();
  }
  const ReplicationPosition position = PositionFromProto(chunk.position());
  absl::MutexLock order(&apply_mu_);
  namespace fs = std::filesystem;
  const std::string id = SnapshotId(position);
  const fs::path checkpoints = CheckpointsDir(options_.data_dir);
  const fs::path staging = checkpoints / absl::StrCat(".incoming-", id);
  const fs::path final_dir = checkpoints / id;
  std::error_code error;
  fs::remove_all(staging, error);
  fs::create_directories(staging, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", staging.string(),
                                            ": ", error.message()));
  }
  uint64_t bytes = 0;
  do {
    STRATA_RETURN_IF_ERROR(CheckSnapshotFileName(chunk.file()));
    STRATA_RETURN_IF_ERROR(
        AppendToFile((staging / chunk.file()).string(), chunk.data()));
    bytes += chunk.data().size();
  } while (reader->Read(&chunk));
  fs::remove_all(final_dir, error);
  fs::rename(staging, final_dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot move the snapshot into ",
                                            final_dir.string(), ": ",
                                            error.message()));
  }
  absl::StatusOr<CheckpointInfo> restored = options_.store->Restore(id);
  fs::remove_all(final_dir, error);
  STRATA_RETURN_IF_ERROR(restored.status());
  STRATA_ASSIGN_OR_RETURN(ReplicationPosition stored,
                          options_.store->ReadReplicationPosition());
  if (stored != position) {
    return absl::DataLossError(absl::StrCat(
        "the snapshot said it stands at sequence ", position.sequence,
        " of term ", position.term, " but its rows stand at ", stored.sequence,
        " of term ", stored.term));
  }
  log_.Reset(position);
  STRATA_LOG(INFO, "replication")
      << "replica " << options_.replica_id << " installed a snapshot of "
      << restored->num_rows << " rows (" << bytes << " bytes) at sequence "
      << position.sequence << " of term " << position.term;
  v1::InstallSnapshotResponse response;
  PositionToProto(position, response.mutable_position());
  return response;
}

absl::StatusOr<std::pair<std::string, ReplicationPosition>>
ReplicaGroup::TakeSnapshot(uint64_t term, const std::string& follower) {
  absl::MutexLock order(&apply_mu_);
  if (!IsPrimaryOf(term)) {
    return absl::UnavailableError("no longer the primary");
  }
  const ReplicationPosition position = log_.last();
  const std::string id = absl::StrCat(SnapshotId(position), "-to-", follower);
  const std::filesystem::path dir = CheckpointsDir(options_.data_dir) / id;
  // Left by an earlier attempt that was cut short.
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  STRATA_RETURN_IF_ERROR(options_.store->Checkpoint(id, 0).status());
  return std::make_pair(dir.string(), position);
}

}  // namespace strata
