#include "serving/checkpoint_loader.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/rocksdb_logger.h"
#include "embedding/storage_format.h"
#include "rocksdb/db.h"
#include "serving/internal/row_format.h"
#include "serving/internal/store_records.h"

namespace strata {
namespace {

using serving_internal::ParseRowKey;

// Rows per store write while copying.
constexpr size_t kRowsPerWrite = 4096;
constexpr const char* kTablePrefix = kTableRecordPrefix;

// A read-only checkpoint database and its two column families.
struct Checkpoint {
  ~Checkpoint() {
    for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
  }
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
};

// The parent an incremental checkpoint names in its manifest; empty for a
// full one (or a directory without a manifest).
std::string IncrementalParent(const std::string& dir) {
  std::ifstream manifest(dir + "/STRATA_CHECKPOINT");
  for (std::string line; std::getline(manifest, line);) {
    if (absl::StartsWith(line, "parent=")) return line.substr(7);
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(
    const std::string& dir) {
  if (const std::string parent = IncrementalParent(dir); !parent.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", dir, " is incremental (it builds on '", parent,
        "'); the serving PS loads full checkpoints: restore it on the "
        "training shards and take a full one"));
  }
  rocksdb::DBOptions options;
  options.paranoid_checks = true;
  options.info_log = RocksDbLogger();
  // Read-only opening may list a subset of the column families: the
  // optimizer state is not needed.
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"values", rocksdb::ColumnFamilyOptions()}};
  auto checkpoint = std::make_unique<Checkpoint>();
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, dir, families,
                                                   &checkpoint->handles, &db);
  if (!s.ok()) {
    const std::string message =
        absl::StrCat("cannot open checkpoint ", dir, ": ", s.ToString());
    if (s.IsCorruption()) return absl::DataLossError(message);
    if (s.IsPathNotFound() || s.IsIOError() || s.IsInvalidArgument()) {
      return absl::NotFoundError(message);
    }
    return absl::InternalError(message);
  }
  checkpoint->db.reset(db);
  return checkpoint;
}

// Table id in the checkpoint -> config, for the tables to copy.
absl::StatusOr<absl::flat_hash_map<TableId, EmbeddingTableConfig>> ReadTables(
    Checkpoint& checkpoint, const std::vector<std::string>& wanted) {
  absl::flat_hash_map<TableId, EmbeddingTableConfig> tables;
  std::unique_ptr<rocksdb::Iterator> it(checkpoint.db->NewIterator(
      rocksdb::ReadOptions(), checkpoint.handles[0]));
  for (it->Seek(kTablePrefix); it->Valid(); it->Next()) {
    const absl::string_view key(it->key().data(), it->key().size());
    if (!absl::StartsWith(key, kTablePrefix)) break;
    STRATA_ASSIGN_OR_RETURN(
        auto table, serving_internal::ParseTableRecord(absl::string_view(
                        it->value().data(), it->value().size())));
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(),
                                     table.second.name) == wanted.end()) {
      continue;
    }
    tables[table.first] = std::move(table.second);
  }
  if (!it->status().ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot read tables: ", it->status().ToString()));
  }
  return tables;
}

}  // namespace

absl::StatusOr<CheckpointLoadResult> LoadCheckpoint(
    const std::string& checkpoint_dir, uint32_t shard_index,
    const std::vector<std::string>& tables, ServingStore& store) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint,
                          OpenCheckpoint(checkpoint_dir));
  STRATA_ASSIGN_OR_RETURN(auto configs, ReadTables(*checkpoint, tables));
  CheckpointLoadResult result;
  result.tables = configs.size();
  STRATA_RETURN_IF_ERROR(store.BeginSnapshot(shard_index));
  ShardUpdate update;
  update.shard_index = shard_index;
  for (const auto& [id, config] : configs) update.tables.push_back(config);
  STRATA_RETURN_IF_ERROR(store.Apply(update));

  // Rows are copied in runs of one table, a write at a time.
  std::vector<FeatureId> keys;
  std::vector<float> values;
  const EmbeddingTableConfig* current = nullptr;
  auto flush = [&]() -> absl::Status {
    if (keys.empty()) return absl::OkStatus();
    ShardUpdate rows;
    rows.shard_index = shard_index;
    rows.rows.push_back({current->name, keys, values});
    STRATA_RETURN_IF_ERROR(store.Apply(rows));
    result.rows += keys.size();
    keys.clear();
    values.clear();
    return absl::OkStatus();
  };
  std::unique_ptr<rocksdb::Iterator> it(checkpoint->db->NewIterator(
      rocksdb::ReadOptions(), checkpoint->handles[1]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TableId table_id = 0;
    FeatureId key = 0;
    if (!ParseRowKey(absl::string_view(it->key().data(), it->key().size()),
                     &table_id, &key)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", checkpoint_dir, " holds a bad row key"));
    }
    auto config = configs.find(table_id);
    if (config == configs.end()) continue;
    if (&config->second != current || keys.size() == kRowsPerWrite) {
      STRATA_RETURN_IF_ERROR(flush());
      current = &config->second;
    }
    if (it->value().size() != current->dim * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", checkpoint_dir, ": row ", key, " of table '",
          current->name, "' has ", it->value().size(), " bytes"));
    }
    keys.push_back(key);
    const size_t start = values.size();
    values.resize(start + current->dim);
    std::memcpy(values.data() + start, it->value().data(), it->value().size());
  }
  if (!it->status().ok()) {
    return absl::DataLossError(absl::StrCat("cannot read checkpoint ",
                                            checkpoint_dir, ": ",
                                            it->status().ToString()));
  }
  STRATA_RETURN_IF_ERROR(flush());
  STRATA_RETURN_IF_ERROR(store.EndSnapshot(shard_index, ShardPosition()));
  return result;
}

}  // namespace strata
