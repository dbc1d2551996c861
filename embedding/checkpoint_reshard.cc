#include "embedding/checkpoint_reshard.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "embedding/embedding_store.h"
#include "embedding/internal/checkpoint_delta.h"
#include "embedding/internal/rocksdb_files.h"
#include "embedding/internal/sorted_runs_memtable.h"
#include "embedding/rocksdb_logger.h"
#include "embedding/storage_format.h"
#include "embedding/table_config.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace strata {
namespace {

using embedding_internal::ApplyDeltas;
using embedding_internal::kFamilyNames;
using embedding_internal::kNumFamilies;
using embedding_internal::RocksDbFiles;
using embedding_internal::RocksError;

constexpr int kValuesFamily = 1;
constexpr int kOptimizerFamily = 2;
// A write batch of a target is written once it holds this many bytes.
constexpr size_t kBatchBytes = size_t{4} << 20;
// Memtable size of each column family of a new shard's database.
constexpr size_t kWriteBufferBytes = size_t{64} << 20;

std::vector<rocksdb::ColumnFamilyDescriptor> FamilyDescriptors(
    const rocksdb::ColumnFamilyOptions& options) {
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const char* name : kFamilyNames) families.emplace_back(name, options);
  return families;
}

// An open RocksDB database with the store's three column families.
class FamilyDb {
 public:
  FamilyDb() = default;
  FamilyDb(const FamilyDb&) = delete;
  FamilyDb& operator=(const FamilyDb&) = delete;
  ~FamilyDb() { Close().IgnoreError(); }

  absl::Status Open(const std::string& dir, bool read_only) {
    rocksdb::Options options;
    options.paranoid_checks = true;
    options.info_log = RocksDbLogger();
    options.create_if_missing = !read_only;
    options.create_missing_column_families = !read_only;
    if (!read_only) {
      // Rows arrive in batches and are read back only after the flush: an
      // unsorted memtable makes each insert an append (a skip list spent a
      // third of the time comparing keys), put in order once per flush, by
      // merging the runs in which the rows came.
      options.memtable_factory =
          std::make_shared<embedding_internal::SortedRunsMemTableFactory>();
      options.allow_concurrent_memtable_write = false;
      options.write_buffer_size = kWriteBufferBytes;
    }
    const std::vector<rocksdb::ColumnFamilyDescriptor> families =
        FamilyDescriptors(rocksdb::ColumnFamilyOptions(options));
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status s =
        read_only ? rocksdb::DB::OpenForReadOnly(options, dir, families,
                                                 &handles_, &raw)
                  : rocksdb::DB::Open(options, dir, families, &handles_, &raw);
    if (!s.ok()) return RocksError(absl::StrCat("cannot open ", dir), s);
    db_.reset(raw);
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (!db_) return absl::OkStatus();
    for (rocksdb::ColumnFamilyHandle* handle : handles_) {
      db_->DestroyColumnFamilyHandle(handle);
    }
    handles_.clear();
    const rocksdb::Status s = db_->Close();
    db_.reset();
    return s.ok() ? absl::OkStatus() : RocksError("cannot close", s);
  }

  rocksdb::DB* db() const { return db_.get(); }
  rocksdb::ColumnFamilyHandle* family(int index) const {
    return handles_[index];
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

// One source shard's checkpoint, opened read-only; an incremental one is
// first materialized (full checkpoint copied, deltas applied) in
// `scratch_dir`.
struct SourceCheckpoint {
  std::string data_dir;
  CheckpointInfo info;
  FamilyDb db;
  // Source table id -> table name.
  absl::flat_hash_map<TableId, std::string> table_names;
};

absl::Status OpenSource(const std::string& data_dir, const std::string& id,
                        const std::string& scratch_dir, FileSystem& files,
                        SourceCheckpoint& source) {
  source.data_dir = data_dir;
  RocksDbFiles layout(data_dir, &files);
  absl::StatusOr<std::vector<CheckpointInfo>> chain = layout.RestoreChain(id);
  if (!chain.ok()) {
    return absl::Status(chain.status().code(),
                        absl::StrCat(data_dir, ": ", chain.status().message()));
  }
  source.info = chain->back();
  if (chain->size() == 1) {
    return source.db.Open(layout.CheckpointDir(id), /*read_only=*/true);
  }
  std::error_code error;
  std::filesystem::copy(layout.CheckpointDir(chain->front().checkpoint_id),
                        scratch_dir, std::filesystem::copy_options::recursive,
                        error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot copy checkpoint '", chain->front().checkpoint_id,
                     "' of ", data_dir, ": ", error.message()));
  }
  std::vector<std::string> deltas;
  for (size_t i = 1; i < chain->size(); ++i) {
    deltas.push_back(layout.CheckpointDir((*chain)[i].checkpoint_id));
  }
  STRATA_RETURN_IF_ERROR(ApplyDeltas(scratch_dir, deltas));
  return source.db.Open(scratch_dir, /*read_only=*/true);
}

// Reads the table records of `source` into `tables` (name -> config),
// FAILED_PRECONDITION when an earlier source defined a table differently.
absl::Status ReadTables(
    SourceCheckpoint& source,
    std::map<std::string, std::pair<EmbeddingTableConfig, std::string>>&
        tables) {
  std::unique_ptr<rocksdb::Iterator> it(
      source.db.db()->NewIterator(rocksdb::ReadOptions(), source.db.family(0)));
  for (it->Seek(kTableRecordPrefix); it->Valid(); it->Next()) {
    const absl::string_view key(it->key().data(), it->key().size());
    if (!absl::StartsWith(key, kTableRecordPrefix)) break;
    STRATA_ASSIGN_OR_RETURN(
        auto record, ParseTableRecord(absl::string_view(it->value().data(),
                                                        it->value().size())));
    const EmbeddingTableConfig& config = record.second;
    source.table_names[record.first] = config.name;
    auto [known, inserted] =
        tables.try_emplace(config.name, config, source.data_dir);
    if (!inserted && !SameTableConfig(known->second.first, config)) {
      return absl::FailedPreconditionError(
          absl::StrCat("table '", config.name, "' differs between ",
                       known->second.second, " and ", source.data_dir, ": ",
                       TableConfigDifference(known->second.first, config)));
    }
  }
  if (!it->status().ok()) {
    return RocksError(
        absl::StrCat("cannot read the tables of ", source.data_dir),
        it->status());
  }
  return absl::OkStatus();
}

// A new shard's checkpoint being written.
struct TargetCheckpoint {
  std::string data_dir;
  std::string staging_dir;
  FamilyDb db;
  rocksdb::WriteBatch batch;
  uint64_t rows = 0;

  absl::Status WriteBatch() {
    if (batch.Count() == 0) return absl::OkStatus();
    rocksdb::WriteOptions options;
    options.disableWAL = true;  // flushed before the checkpoint is published
    const rocksdb::Status s = db.db()->Write(options, &batch);
    batch.Clear();
    return s.ok()
               ? absl::OkStatus()
               : RocksError(absl::StrCat("cannot write to ", staging_dir), s);
  }
};

// Where every table goes: its id on the new shards and its placement hash.
struct TargetTable {
  TableId id;
  uint64_t hash;
};

// What CopyFamily copied of one source's column family.
struct CopiedRows {
  uint64_t copied = 0;
  uint64_t skipped = 0;  // of buckets the source does not own
};

// Sends every row of one column family of `source` (shard `source_index`
// under `source_map`) to the new shard that owns it; a row of a bucket the
// source does not own is skipped with `skip_unowned`, refused without.
absl::StatusOr<CopiedRows> CopyFamily(
    const SourceCheckpoint& source, uint32_t source_index,
    const ShardMap& source_map, bool skip_unowned, int family,
    const absl::flat_hash_map<std::string, TargetTable>& target_tables,
    std::vector<std::unique_ptr<TargetCheckpoint>>& targets) {
  CopiedRows rows;
  const uint32_t num_targets = static_cast<uint32_t>(targets.size());
  std::unique_ptr<rocksdb::Iterator> it(source.db.db()->NewIterator(
      rocksdb::ReadOptions(), source.db.family(family)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TableId table_id = 0;
    FeatureId key = 0;
    const bool parsed = ParseRowKey(
        absl::string_view(it->key().data(), it->key().size()), &table_id, &key);
    const auto name = source.table_names.find(table_id);
    if (!parsed || name == source.table_names.end()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", source.info.checkpoint_id, "' of ", source.data_dir,
          " has a row with a bad key or of an unknown table"));
    }
    const std::string& table_name = name->second;
    const TargetTable& table = target_tables.at(table_name);
    const uint32_t bucket = BucketOf(table.hash, key);
    if (source_map.OwnerOf(bucket) != source_index) {
      if (skip_unowned) {
        ++rows.skipped;
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          source.data_dir, " (given as shard ", source_index, " of ",
          source_map.num_shards(), ") holds key ", key, " of table '",
          table_name, "', which shard ", source_map.OwnerOf(bucket),
          " owns under shard map version ", source_map.version(),
          ": list the source directories in shard-index order, all of one "
          "cluster"));
    }
    TargetCheckpoint& target =
        *targets[DefaultBucketOwner(bucket, num_targets)];
    const rocksdb::Status s = target.batch.Put(
        target.db.family(family), RowKey(table.id, key), it->value());
    if (!s.ok()) return RocksError("cannot batch a row", s);
    ++rows.copied;
    if (family == kValuesFamily) ++target.rows;
    if (target.batch.GetDataSize() >= kBatchBytes) {
      STRATA_RETURN_IF_ERROR(target.WriteBatch());
    }
  }
  if (!it->status().ok()) {
    return RocksError(
        absl::StrCat("cannot read checkpoint '", source.info.checkpoint_id,
                     "' of ", source.data_dir),
        it->status());
  }
  return rows;
}

// Flushes and closes `target`, publishes its checkpoint and makes its live
// database a copy of it.
absl::Status FinishTarget(TargetCheckpoint& target, const CheckpointInfo& info,
                          FileSystem& files) {
  STRATA_RETURN_IF_ERROR(target.WriteBatch());
  rocksdb::FlushOptions flush;
  flush.wait = true;
  for (int family = 0; family < kNumFamilies; ++family) {
    const rocksdb::Status s =
        target.db.db()->Flush(flush, target.db.family(family));
    if (!s.ok()) return RocksError("cannot flush", s);
  }
  STRATA_RETURN_IF_ERROR(target.db.Close());
  RocksDbFiles layout(target.data_dir, &files);
  STRATA_RETURN_IF_ERROR(layout.PublishCheckpoint(target.staging_dir, info));
  // The swap that a restore does, onto an empty database.
  STRATA_RETURN_IF_ERROR(files.CreateDirs(layout.db_dir()));
  STRATA_RETURN_IF_ERROR(layout.SwapInCheckpoint(info.checkpoint_id, nullptr));
  return layout.FinishSwap();
}

absl::Status ValidateOptions(const ReshardCheckpointOptions& options,
                             FileSystem& files) {
  if (options.source_dirs.empty()) {
    return absl::InvalidArgumentError("no source data directory given");
  }
  if (options.target_dirs.empty()) {
    return absl::InvalidArgumentError("no target data directory given");
  }
  STRATA_RETURN_IF_ERROR(
      RocksDbFiles::ValidateCheckpointId(options.checkpoint_id));
  if (!options.target_checkpoint_id.empty()) {
    STRATA_RETURN_IF_ERROR(
        RocksDbFiles::ValidateCheckpointId(options.target_checkpoint_id));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& dir : options.source_dirs) {
    if (dir.empty() || !seen.insert(dir).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "source data directory '", dir, "' is empty or given twice"));
    }
  }
  for (const std::string& dir : options.target_dirs) {
    if (dir.empty() || !seen.insert(dir).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("target data directory '", dir,
                       "' is empty, given twice or also a source"));
    }
    if (!files.Exists(dir)) continue;
    if (!files.IsDirectory(dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target ", dir, " is not a directory"));
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> entries,
                            files.ListDir(dir));
    if (!entries.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("target data directory ", dir,
                       " is not empty: new shards start in new directories"));
    }
  }
  return absl::OkStatus();
}

// Where source `s`'s incremental checkpoint is materialized: inside the first
// target, which is cleared on failure.
std::string ScratchDir(const ReshardCheckpointOptions& options, uint32_t s) {
  return absl::StrCat(options.target_dirs[0], "/.reshard-source-", s);
}

absl::StatusOr<ReshardCheckpointResult> Reshard(
    const ReshardCheckpointOptions& options, FileSystem& files) {
  ReshardCheckpointResult result;
  result.checkpoint_id = options.target_checkpoint_id.empty()
                             ? options.checkpoint_id
                             : options.target_checkpoint_id;
  const uint32_t num_sources =
      static_cast<uint32_t>(options.source_dirs.size());
  const ShardMap source_map =
      options.source_map ? *options.source_map : ShardMap::Modulo(num_sources);
  if (source_map.num_shards() != num_sources) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's shard map (", source_map.Summary(),
                     ") has ", source_map.num_shards(), " shards, but ",
                     num_sources, " source directories are given"));
  }
  std::vector<std::unique_ptr<SourceCheckpoint>> sources;
  std::map<std::string, std::pair<EmbeddingTableConfig, std::string>> tables;
  STRATA_RETURN_IF_ERROR(files.CreateDirs(options.target_dirs[0]));
  for (uint32_t s = 0; s < num_sources; ++s) {
    sources.push_back(std::make_unique<SourceCheckpoint>());
    STRATA_RETURN_IF_ERROR(
        OpenSource(options.source_dirs[s], options.checkpoint_id,
                   ScratchDir(options, s), files, *sources.back()));
    STRATA_RETURN_IF_ERROR(ReadTables(*sources.back(), tables));
    result.source_global_steps.push_back(sources.back()->info.global_step);
    result.global_step =
        std::max(result.global_step, sources.back()->info.global_step);
  }

  std::vector<std::unique_ptr<TargetCheckpoint>> targets;
  for (const std::string& dir : options.target_dirs) {
    targets.push_back(std::make_unique<TargetCheckpoint>());
    TargetCheckpoint& target = *targets.back();
    target.data_dir = dir;
    RocksDbFiles layout(dir, &files);
    STRATA_RETURN_IF_ERROR(layout.Prepare());
    target.staging_dir = layout.CheckpointStagingDir(result.checkpoint_id);
    STRATA_RETURN_IF_ERROR(target.db.Open(target.staging_dir, false));
  }
  // Every table on every new shard, numbered in name order.
  absl::flat_hash_map<std::string, TargetTable> target_tables;
  TableId next_id = 1;
  for (const auto& [name, config_and_dir] : tables) {
    target_tables[name] = TargetTable{next_id, HashString(name)};
    for (auto& target : targets) {
      const rocksdb::Status s =
          target->batch.Put(target->db.family(0), TableRecordKey(name),
                            TableRecordValue(next_id, config_and_dir.first));
      if (!s.ok()) return RocksError("cannot batch a table record", s);
    }
    result.tables.push_back(name);
    ++next_id;
  }

  for (uint32_t s = 0; s < num_sources; ++s) {
    STRATA_ASSIGN_OR_RETURN(
        const CopiedRows rows,
        CopyFamily(*sources[s], s, source_map, options.skip_unowned_rows,
                   kValuesFamily, target_tables, targets));
    STRATA_RETURN_IF_ERROR(CopyFamily(*sources[s], s, source_map,
                                      options.skip_unowned_rows,
                                      kOptimizerFamily, target_tables, targets)
                               .status());
    result.source_rows.push_back(rows.copied);
    result.skipped_rows.push_back(rows.skipped);
    STRATA_RETURN_IF_ERROR(sources[s]->db.Close());
    STRATA_RETURN_IF_ERROR(files.DeleteRecursively(ScratchDir(options, s)));
  }
  for (auto& target : targets) {
    CheckpointInfo info;
    info.checkpoint_id = result.checkpoint_id;
    info.global_step = result.global_step;
    info.num_rows = target->rows;
    STRATA_RETURN_IF_ERROR(FinishTarget(*target, info, files));
    result.target_rows.push_back(target->rows);
  }
  return result;
}

// Deletes what a failed reshard wrote (the targets were empty before).
void ClearTargets(const ReshardCheckpointOptions& options, FileSystem& files) {
  for (const std::string& dir : options.target_dirs) {
    absl::StatusOr<std::vector<std::string>> entries = files.ListDir(dir);
    if (!entries.ok()) continue;
    for (const std::string& entry : *entries) {
      files.DeleteRecursively(absl::StrCat(dir, "/", entry)).IgnoreError();
    }
  }
}

}  // namespace

absl::StatusOr<ReshardCheckpointResult> ReshardCheckpoint(
    const ReshardCheckpointOptions& options) {
  FileSystem& files = options.file_system != nullptr ? *options.file_system
                                                     : *FileSystem::Default();
  STRATA_RETURN_IF_ERROR(ValidateOptions(options, files));
  absl::StatusOr<ReshardCheckpointResult> result = Reshard(options, files);
  if (!result.ok()) ClearTargets(options, files);
  return result;
}

}  // namespace strata
