#include "embedding/internal/checkpoint_delta.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/rocksdb_logger.h"
#include "embedding/storage_format.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/write_batch.h"

namespace strata {
namespace embedding_internal {
namespace {

std::string DeltaFile(const std::string& dir, int family) {
  return absl::StrCat(dir, "/", kFamilyNames[family], ".sst");
}

// Collects the rows written to one column family.
class KeyCollector : public rocksdb::WriteBatch::Handler {
 public:
  KeyCollector(uint32_t family_id,
               absl::flat_hash_set<std::pair<uint32_t, uint64_t>>& rows,
               bool& overflowed)
      : family_id_(family_id), rows_(rows), overflowed_(overflowed) {}

  rocksdb::Status PutCF(uint32_t family_id, const rocksdb::Slice& key,
                        const rocksdb::Slice&) override {
    return DeleteCF(family_id, key);
  }
  rocksdb::Status DeleteCF(uint32_t family_id,
                           const rocksdb::Slice& key) override {
    TableId table;
    FeatureId feature;
    if (family_id != family_id_ || overflowed_ ||
        !ParseRowKey(absl::string_view(key.data(), key.size()), &table,
                     &feature)) {
      return rocksdb::Status::OK();
    }
    if (rows_.size() >= ChangedRowTracker::kMaxTrackedRows) {
      overflowed_ = true;
      rows_.clear();
    } else {
      rows_.emplace(table, feature);
    }
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(uint32_t family_id,
                                 const rocksdb::Slice& key) override {
    return DeleteCF(family_id, key);
  }

 private:
  const uint32_t family_id_;
  absl::flat_hash_set<std::pair<uint32_t, uint64_t>>& rows_;
  bool& overflowed_;
};

// Writes the sorted entries one SST file; no file when there are none.
class FamilyWriter {
 public:
  explicit FamilyWriter(std::string path)
      : path_(std::move(path)),
        writer_(rocksdb::EnvOptions(), rocksdb::Options()) {}

  absl::Status Put(const rocksdb::Slice& key, const rocksdb::Slice& value) {
    STRATA_RETURN_IF_ERROR(OpenOnce());
    return Check(writer_.Put(key, value));
  }
  absl::Status Delete(const rocksdb::Slice& key) {
    STRATA_RETURN_IF_ERROR(OpenOnce());
    return Check(writer_.Delete(key));
  }
  absl::Status Finish() {
    if (!open_) return absl::OkStatus();
    return Check(writer_.Finish());
  }

 private:
  absl::Status OpenOnce() {
    if (open_) return absl::OkStatus();
    open_ = true;
    return Check(writer_.Open(path_));
  }
  absl::Status Check(const rocksdb::Status& s) {
    if (s.ok()) return absl::OkStatus();
    return RocksError(absl::StrCat("cannot write delta file ", path_), s);
  }

  const std::string path_;
  rocksdb::SstFileWriter writer_;
  bool open_ = false;
};

absl::Status CopyDefaultFamily(rocksdb::DB* db,
                               rocksdb::ColumnFamilyHandle* handle,
                               FamilyWriter& out) {
  std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), handle));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    STRATA_RETURN_IF_ERROR(out.Put(it->key(), it->value()));
  }
  if (!it->status().ok()) {
    return RocksError("cannot read the store", it->status());
  }
  return absl::OkStatus();
}

// Each row's current value and state, or deletions for rows now gone.
absl::Status CopyRows(rocksdb::DB* db,
                      const std::vector<rocksdb::ColumnFamilyHandle*>& handles,
                      const std::vector<std::string>& row_keys,
                      FamilyWriter& values, FamilyWriter& states) {
  constexpr size_t kBatch = 4096;
  for (size_t begin = 0; begin < row_keys.size(); begin += kBatch) {
    const size_t end = std::min(row_keys.size(), begin + kBatch);
    std::vector<rocksdb::Slice> keys(row_keys.begin() + begin,
                                     row_keys.begin() + end);
    for (int family = 1; family <= 2; ++family) {
      FamilyWriter& out = family == 1 ? values : states;
      std::vector<rocksdb::PinnableSlice> found(keys.size());
      std::vector<rocksdb::Status> statuses(keys.size());
      db->MultiGet(rocksdb::ReadOptions(), handles[family], keys.size(),
                   keys.data(), found.data(), statuses.data());
      for (size_t i = 0; i < keys.size(); ++i) {
        if (statuses[i].ok()) {
          STRATA_RETURN_IF_ERROR(out.Put(keys[i], found[i]));
        } else if (statuses[i].IsNotFound()) {
          STRATA_RETURN_IF_ERROR(out.Delete(keys[i]));
        } else {
          return RocksError("cannot read the store", statuses[i]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RocksError(absl::string_view what, const rocksdb::Status& s) {
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

void ChangedRowTracker::Restart(const std::string& base_id) {
  absl::MutexLock lock(&mu_);
  base_id_ = base_id;
  overflowed_ = false;
  rows_ = {};
}

std::string ChangedRowTracker::base_id() const {
  absl::MutexLock lock(&mu_);
  return base_id_;
}

void ChangedRowTracker::Record(const rocksdb::WriteBatch& batch,
                               uint32_t values_family_id) {
  absl::MutexLock lock(&mu_);
  if (base_id_.empty()) return;
  KeyCollector collector(values_family_id, rows_, overflowed_);
  // The batch was just applied, so it parses; a failure only means keys go
  // unrecorded, which the next full checkpoint repairs.
  batch.Iterate(&collector).PermitUncheckedError();
}

std::vector<std::string> ChangedRowTracker::SortedKeys() const {
  absl::MutexLock lock(&mu_);
  // Row keys are big-endian (table, feature): their order is this one.
  std::vector<std::pair<uint32_t, uint64_t>> rows(rows_.begin(), rows_.end());
  std::sort(rows.begin(), rows.end());
  std::vector<std::string> keys;
  keys.reserve(rows.size());
  for (const auto& [table, feature] : rows) {
    keys.push_back(RowKey(table, feature));
  }
  return keys;
}

bool ChangedRowTracker::overflowed() const {
  absl::MutexLock lock(&mu_);
  return overflowed_;
}

absl::Status WriteDelta(
    rocksdb::DB* db, const std::vector<rocksdb::ColumnFamilyHandle*>& handles,
    const std::vector<std::string>& row_keys, const std::string& dir) {
  // The store's memtables are unsorted vectors, which a point lookup must
  // sort first: flushed, the rows are read from sorted files instead.
  rocksdb::FlushOptions flush;
  rocksdb::Status flushed = db->Flush(flush, handles);
  if (!flushed.ok()) return RocksError("cannot flush the store", flushed);
  FamilyWriter defaults(DeltaFile(dir, 0));
  FamilyWriter values(DeltaFile(dir, 1));
  FamilyWriter states(DeltaFile(dir, 2));
  STRATA_RETURN_IF_ERROR(CopyDefaultFamily(db, handles[0], defaults));
  STRATA_RETURN_IF_ERROR(CopyRows(db, handles, row_keys, values, states));
  STRATA_RETURN_IF_ERROR(defaults.Finish());
  STRATA_RETURN_IF_ERROR(values.Finish());
  return states.Finish();
}

absl::Status ApplyDeltas(const std::string& db_dir,
                         const std::vector<std::string>& dirs) {
  rocksdb::Options options;
  options.paranoid_checks = true;
  options.info_log = RocksDbLogger();
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const char* name : kFamilyNames) {
    families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(options, db_dir, families, &handles, &raw);
  if (!s.ok()) return RocksError("cannot open the restored checkpoint", s);
  std::unique_ptr<rocksdb::DB> db(raw);
  absl::Status applied = absl::OkStatus();
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = false;  // the checkpoint keeps its files
  ingest.verify_checksums_before_ingest = true;
  for (const std::string& dir : dirs) {
    for (int family = 0; family < kNumFamilies && applied.ok(); ++family) {
      const std::string file = DeltaFile(dir, family);
      if (!rocksdb::Env::Default()->FileExists(file).ok()) continue;
      s = db->IngestExternalFile(handles[family], {file}, ingest);
      if (!s.ok()) applied = RocksError(absl::StrCat("cannot apply ", file), s);
    }
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    db->DestroyColumnFamilyHandle(handle);
  }
  s = db->Close();
  if (applied.ok() && !s.ok()) return RocksError("cannot close", s);
  return applied;
}

}  // namespace embedding_internal
}  // namespace strata
