#include "server/shard_map_store.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordination/etcd_client.h"

namespace strata {
namespace {

absl::Status Changed(const std::string& where, const ShardMap& current) {
  return absl::FailedPreconditionError(
      absl::StrCat("the shard map in ", where, " is no longer version ",
                   current.version(), ": another shard or tool changed it"));
}

class FileShardMapStore final : public ShardMapStore {
 public:
  FileShardMapStore(FileSystem* files, std::string data_dir)
      : files_(files), path_(absl::StrCat(data_dir, "/", kShardMapFile)) {}

  absl::StatusOr<ShardMap> Read() override {
    if (!files_->Exists(path_)) {
      return absl::NotFoundError(absl::StrCat("no ", path_));
    }
    STRATA_ASSIGN_OR_RETURN(std::string text, files_->ReadFile(path_));
    absl::StatusOr<ShardMap> map = ShardMap::Parse(text);
    if (!map.ok()) {
      return absl::DataLossError(
          absl::StrCat(path_, ": ", map.status().message()));
    }
    return map;
  }

  absl::Status Replace(const ShardMap& current, const ShardMap& next) override {
    STRATA_ASSIGN_OR_RETURN(ShardMap stored, Read());
    if (stored != current) return Changed(path_, current);
    return files_->WriteFileAtomically(path_, next.Serialize());
  }

  std::string Where() const override { return path_; }

 protected:
  absl::Status CreateIfAbsent(const ShardMap& map) override {
    if (files_->Exists(path_)) return absl::OkStatus();
    return files_->WriteFileAtomically(path_, map.Serialize());
  }

 private:
  FileSystem* files_;
  std::string path_;
};

class EtcdShardMapStore final : public ShardMapStore {
 public:
  EtcdShardMapStore(EtcdClient* etcd, std::string cluster)
      : etcd_(etcd), key_(absl::StrCat("/", cluster, "/shard_map")) {}

  absl::StatusOr<ShardMap> Read() override {
    STRATA_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> stored, Get());
    if (!stored) return absl::NotFoundError(absl::StrCat("no ", Where()));
    return ParseStored(*stored);
  }

  absl::Status Replace(const ShardMap& current, const ShardMap& next) override {
    STRATA_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> stored, Get());
    if (!stored) return absl::NotFoundError(absl::StrCat("no ", Where()));
    STRATA_ASSIGN_OR_RETURN(ShardMap map, ParseStored(*stored));
    if (map != current) return Changed(Where(), current);
    STRATA_ASSIGN_OR_RETURN(
        bool swapped,
        etcd_->PutIfModifiedAt(key_, next.Serialize(), stored->mod_revision));
    if (!swapped) return Changed(Where(), current);
    return absl::OkStatus();
  }

  std::string Where() const override { return absl::StrCat("etcd key ", key_); }

 protected:
  absl::Status CreateIfAbsent(const ShardMap& map) override {
    return etcd_->CreateIfAbsent(key_, map.Serialize(), /*lease=*/0).status();
  }

 private:
  absl::StatusOr<std::optional<EtcdKeyValue>> Get() { return etcd_->Get(key_); }

  absl::StatusOr<ShardMap> ParseStored(const EtcdKeyValue& stored) const {
    absl::StatusOr<ShardMap> map = ShardMap::Parse(stored.value);
    if (!map.ok()) {
      return absl::DataLossError(
          absl::StrCat(Where(), ": ", map.status().message()));
    }
    return map;
  }

  EtcdClient* etcd_;
  std::string key_;
};

}  // namespace

absl::StatusOr<ShardMap> ShardMapStore::LoadOrCreate(uint32_t num_shards) {
  absl::StatusOr<ShardMap> stored = Read();
  if (absl::IsNotFound(stored.status())) {
    // Several shards may race to create it (etcd): the first one wins and
    // every one reads what it wrote.
    STRATA_RETURN_IF_ERROR(CreateIfAbsent(ShardMap::Modulo(num_shards)));
    stored = Read();
  }
  if (!stored.ok()) return stored.status();
  if (stored->num_shards() != num_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shard map in ", Where(), " has ", stored->num_shards(),
        " shards (", stored->Summary(),
        "), but this shard was started with "
        "--num_shards=",
        num_shards, ": start it with --num_shards=", stored->num_shards()));
  }
  return stored;
}

std::unique_ptr<ShardMapStore> CreateFileShardMapStore(FileSystem* files,
                                                       std::string data_dir) {
  return std::make_unique<FileShardMapStore>(files, std::move(data_dir));
}

std::unique_ptr<ShardMapStore> CreateEtcdShardMapStore(EtcdClient* etcd,
                                                       std::string cluster) {
  return std::make_unique<EtcdShardMapStore>(etcd, std::move(cluster));
}

namespace {

std::string CheckpointDir(const std::string& data_dir,
                          const std::string& checkpoint_id) {
  return absl::StrCat(data_dir, "/checkpoints/", checkpoint_id);
}

}  // namespace

absl::Status WriteCheckpointShardMap(FileSystem& files,
                                     const std::string& data_dir,
                                     const std::string& checkpoint_id,
                                     const ShardMap& map) {
  return files.WriteFileAtomically(
      absl::StrCat(CheckpointDir(data_dir, checkpoint_id), "/", kShardMapFile),
      map.Serialize());
}

absl::StatusOr<ShardMap> ReadCheckpointShardMap(
    FileSystem& files, const std::string& data_dir,
    const std::string& checkpoint_id) {
  return CreateFileShardMapStore(&files, CheckpointDir(data_dir, checkpoint_id))
      ->Read();
}

}  // namespace strata
