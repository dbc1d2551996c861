#include "embedding/internal/rocksdb_files.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "embedding/internal/checkpoint_manifest.h"

namespace strata {
namespace embedding_internal {
namespace {

constexpr char kManifestName[] = "STRATA_CHECKPOINT";
constexpr char kStagingPrefix[] = ".staging-";

}  // namespace

RocksDbFiles::RocksDbFiles(std::string data_dir, FileSystem* file_system)
    : data_dir_(std::move(data_dir)),
      db_dir_(absl::StrCat(data_dir_, "/db")),
      checkpoints_dir_(absl::StrCat(data_dir_, "/checkpoints")),
      file_system_(file_system) {}

absl::Status RocksDbFiles::Prepare() {
  if (file_system_->Exists(data_dir_) &&
      !file_system_->IsDirectory(data_dir_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir ", data_dir_, " exists and is not a directory"));
  }
  STRATA_RETURN_IF_ERROR(file_system_->CreateDirs(checkpoints_dir_));
  const std::string restoring = absl::StrCat(data_dir_, "/db.restoring");
  const std::string old = absl::StrCat(data_dir_, "/db.old");
  // A restore moves db -> db.old, then db.restoring -> db, and deletes db.old
  // once the copy opened. A crash between the two renames leaves no db:
  // finish the restore. A crash during a rollback (db deleted, db.old not
  // yet renamed back) is finished by the second rename.
  if (!file_system_->Exists(db_dir_) && file_system_->Exists(restoring)) {
    STRATA_RETURN_IF_ERROR(file_system_->Rename(restoring, db_dir_));
  }
  if (!file_system_->Exists(db_dir_) && file_system_->Exists(old)) {
    STRATA_RETURN_IF_ERROR(file_system_->Rename(old, db_dir_));
  }
  STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(restoring));
  STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(old));
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          file_system_->ListDir(checkpoints_dir_));
  for (const std::string& name : names) {
    if (absl::StartsWith(name, kStagingPrefix)) {
      STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(
          absl::StrCat(checkpoints_dir_, "/", name)));
    }
  }
  return absl::OkStatus();
}

absl::Status RocksDbFiles::ValidateCheckpointId(absl::string_view id) {
  return embedding_internal::ValidateCheckpointId(id);
}

std::string RocksDbFiles::CheckpointDir(absl::string_view id) const {
  return absl::StrCat(checkpoints_dir_, "/", id);
}

std::string RocksDbFiles::CheckpointStagingDir(absl::string_view id) const {
  return absl::StrCat(checkpoints_dir_, "/", kStagingPrefix, id);
}

bool RocksDbFiles::CheckpointExists(absl::string_view id) {
  return file_system_->Exists(CheckpointDir(id));
}

absl::Status RocksDbFiles::PublishCheckpoint(const std::string& staging_dir,
                                             const CheckpointInfo& info) {
  const std::string manifest = FormatCheckpointManifest(info);
  STRATA_RETURN_IF_ERROR(file_system_->WriteFileAtomically(
      absl::StrCat(staging_dir, "/", kManifestName), manifest));
  return file_system_->Rename(staging_dir, CheckpointDir(info.checkpoint_id));
}

absl::StatusOr<CheckpointInfo> RocksDbFiles::ReadCheckpointInfo(
    absl::string_view id) {
  absl::StatusOr<std::string> manifest = file_system_->ReadFile(
      absl::StrCat(CheckpointDir(id), "/", kManifestName));
  if (!manifest.ok()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "'"));
  }
  return ParseCheckpointManifest(id, *manifest);
}

absl::StatusOr<std::vector<CheckpointInfo>> RocksDbFiles::RestoreChain(
    absl::string_view id) {
  std::vector<CheckpointInfo> chain;
  std::string next(id);
  while (true) {
    absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(next);
    if (!info.ok()) {
      if (chain.empty() || !absl::IsNotFound(info.status())) {
        return info.status();
      }
      return absl::NotFoundError(absl::StrCat(
          "checkpoint '", id, "' builds on '", next, "', which is missing"));
    }
    for (const CheckpointInfo& seen : chain) {
      if (seen.checkpoint_id == info->checkpoint_id) {
        return absl::DataLossError(absl::StrCat(
            "the checkpoints before '", id, "' form a cycle at '", next, "'"));
      }
    }
    next = info->parent_id;
    chain.push_back(*std::move(info));
    if (next.empty()) break;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

std::vector<std::string> RocksDbFiles::ListCheckpoints() {
  std::vector<std::string> out;
  absl::StatusOr<std::vector<std::string>> names =
      file_system_->ListDir(checkpoints_dir_);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, kStagingPrefix) &&
        file_system_->Exists(
            absl::StrCat(checkpoints_dir_, "/", name, "/", kManifestName))) {
      out.push_back(name);
    }
  }
  return out;
}

absl::Status RocksDbFiles::SwapInCheckpoint(
    absl::string_view id,
    const std::function<absl::Status(const std::string& copy_dir)>& prepare) {
  const std::string restoring = absl::StrCat(data_dir_, "/db.restoring");
  const std::string old = absl::StrCat(data_dir_, "/db.old");
  STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(restoring));
  STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(old));
  // A copy, not links: the restored database will modify its own files and
  // the checkpoint must stay as it was.
  std::error_code error;
  std::filesystem::copy(CheckpointDir(id), restoring,
                        std::filesystem::copy_options::recursive, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot copy checkpoint '", id, "': ", error.message()));
  }
  if (prepare) {
    absl::Status prepared = prepare(restoring);
    if (!prepared.ok()) {
      file_system_->DeleteRecursively(restoring).IgnoreError();
      return prepared;
    }
  }
  STRATA_RETURN_IF_ERROR(file_system_->Rename(db_dir_, old));
  return file_system_->Rename(restoring, db_dir_);
}

absl::Status RocksDbFiles::FinishSwap() {
  return file_system_->DeleteRecursively(absl::StrCat(data_dir_, "/db.old"));
}

absl::Status RocksDbFiles::RollBackSwap() {
  STRATA_RETURN_IF_ERROR(file_system_->DeleteRecursively(db_dir_));
  return file_system_->Rename(absl::StrCat(data_dir_, "/db.old"), db_dir_);
}

}  // namespace embedding_internal
}  // namespace strata
