// EmbeddingStore on RocksDB, what makes it durable and portable: periodic
// flushes, checkpoints, restore and value snapshots for the change stream.
// See embedding/internal/rocksdb_embedding_store.h.

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"
#include "rocksdb/utilities/checkpoint.h"

namespace strata {
namespace embedding_internal {

absl::Status RocksDbEmbeddingStore::Flush() {
  absl::MutexLock flush_lock(&flush_mu_);
  FlushCut cut;
  {
    // The cut is taken with pushes excluded, so that no push is half in it;
    // the write itself happens after pushes resume.
    absl::MutexLock lock(&commit_mu_);
    STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
    if (skiplist_memtables_) {
      // A table with a memory budget: a row the cut took is no longer dirty
      // and could leave memory before its write is in, so pushes wait for
      // the write; then rows past the budget leave memory.
      STRATA_RETURN_IF_ERROR(FlushLocked());
      absl::ReaderMutexLock tables_lock(&tables_mu_);
      for (auto& [name, table] : tables_) table->ShrinkToBudget();
      return absl::OkStatus();
    }
    CollectDirtyLocked(cut);
  }
  // Tables are neither dropped nor replaced while flush_mu_ is held, so the
  // cut's table pointers stay valid.
  absl::ReaderMutexLock lock(&commit_mu_);
  return WriteCutLocked(cut);
}

absl::Status RocksDbEmbeddingStore::FlushLocked() {
  STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  FlushCut cut;
  CollectDirtyLocked(cut);
  return WriteCutLocked(cut);
}

absl::Status RocksDbEmbeddingStore::WriteCutLocked(FlushCut& cut) {
  // The push log's segments before the cut hold only rows now in RocksDB.
  const auto drop_logged = [&] {
    if (push_log_ == nullptr || cut.log_segment == 0) return absl::OkStatus();
    return push_log_->DeleteBefore(cut.log_segment);
  };
  if (cut.write.Count() == 0) {
    unwritten_rows_.store(0, std::memory_order_relaxed);
    return drop_logged();
  }
  absl::Status written = CheckOpenLocked();
  if (written.ok()) written = WriteLocked(cut.write, /*sync=*/true);
  if (written.ok()) {
    if (failed_flushes_in_a_row_.exchange(0) > 0) {
      STRATA_LOG(INFO, "store")
          << "flush works again: " << cut.num_rows << " rows written";
    }
    unwritten_rows_.store(0, std::memory_order_relaxed);
    return drop_logged();
  }
  // Memory holds the only copy of these rows: they are written again by
  // the next flush (with whatever pushes changed since), and nothing may
  // report them as written meanwhile.
  for (auto& [table, keys] : cut.rows) table->MarkDirty(keys);
  deduplicator_.MarkChanged(cut.clients);
  unwritten_rows_.store(cut.num_rows, std::memory_order_relaxed);
  const uint64_t failures = failed_flushes_in_a_row_.fetch_add(1) + 1;
  if (failures == 1 || failures % 60 == 0) {
    STRATA_LOG(ERROR, "store")
        << "flush failed " << failures << " time(s) in a row; " << cut.num_rows
        << " rows stay in memory and are written again: " << written;
  }
  return absl::Status(
      written.code(),
      absl::StrCat("flush of ", cut.num_rows,
                   " rows failed (they stay in memory and are written again "
                   "by the next flush): ",
                   written.message()));
}

void RocksDbEmbeddingStore::CollectDirtyLocked(FlushCut& cut) {
  if (!db_ || !BuffersPushes()) return;
  // Pushes are excluded: every record in the segments before this one is
  // in the rows the cut takes.
  if (push_log_ != nullptr) cut.log_segment = push_log_->Rotate();
  // Read before tables_mu_, which pushes take after push_order_mu_.
  ReplicationPosition replication;
  if (push_log_ != nullptr) {
    absl::MutexLock order_lock(&push_order_mu_);
    replication = logged_replication_;
  }
  rocksdb::ColumnFamilyHandle* const values = handles_[1];
  rocksdb::ColumnFamilyHandle* const states = handles_[2];
  absl::ReaderMutexLock lock(&tables_mu_);
  // Sized up front: a cut can hold hundreds of megabytes, and growing the
  // batch by doubling copied it over and over while pushes waited.
  size_t batch_bytes = 0;
  for (auto& [name, table] : tables_) {
    constexpr size_t kPerRecord = kRowKeyBytes + 16;  // lengths and tag
    batch_bytes +=
        table->num_dirty_rows() *
        (2 * kPerRecord + (table->dim() + table->state_dim()) * sizeof(float));
  }
  cut.write = rocksdb::WriteBatch(batch_bytes);
  for (auto& [name, table] : tables_) {
    const TableId id = table->id();
    const uint32_t dim = table->dim(), state_dim = table->state_dim();
    cut.rows.emplace_back(table.get(), std::vector<FeatureId>());
    std::vector<FeatureId>& keys = cut.rows.back().second;
    table->TakeDirtyRows(
        [&](FeatureId key, const float* value, const float* state) {
          keys.push_back(key);
          const std::string row_key = RowKey(id, key);
          cut.write.Put(values, row_key, FloatSlice(value, dim));
          if (state_dim > 0) {
            cut.write.Put(states, row_key, FloatSlice(state, state_dim));
          }
        });
    cut.num_rows += keys.size();
  }
  for (auto& [client, window] : deduplicator_.TakeChangedWindows()) {
    cut.write.Put(handles_[0], absl::StrCat(kClientPrefix, client), window);
    cut.clients.push_back(std::move(client));
  }
  if (replication.sequence > 0 && cut.write.Count() > 0) {
    cut.write.Put(handles_[0], kReplicationPositionKey,
                  EncodeReplicationPosition(replication));
  }
}

absl::Status RocksDbEmbeddingStore::StartPushLogLocked() {
  rocksdb::Env* env = options_.rocksdb_env != nullptr ? options_.rocksdb_env
                                                      : rocksdb::Env::Default();
  const std::string dir = absl::StrCat(options_.data_dir, "/push_log");
  push_log_ = std::make_unique<PushLog>(env, dir);
  STRATA_RETURN_IF_ERROR(push_log_->Start());
  ReplicationPosition replication;
  {
    absl::StatusOr<ReplicationPosition> stored =
        ReadReplicationPositionLocked();
    if (stored.ok()) replication = *stored;
    absl::MutexLock order_lock(&push_order_mu_);
    logged_replication_ = replication;
  }
  if (push_log_->empty()) return absl::OkStatus();
  // The last process died with pushes in the log: their rows come back
  // into memory in log order (the last record of a key carries its latest
  // row), dirty, with their push windows claimed again. The flush below
  // writes them and deletes the segments; on a disk opened read-only it
  // fails, and the segments stay until a flush works.
  absl::flat_hash_map<TableId, EmbeddingTable*> tables;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (auto& [name, table] : tables_) tables[table->id()] = table.get();
  }
  uint64_t records = 0, rows = 0;
  absl::Status replayed = PushLog::Replay(
      env, dir, [&](const PushLogRecord& record) -> absl::Status {
        for (const PushLogRows& logged : record.tables) {
          auto it = tables.find(logged.table);
          if (it == tables.end()) {
            return absl::DataLossError(
                absl::StrCat("the push log holds rows of table id ",
                             logged.table, ", which the store does not have"));
          }
          EmbeddingTable& table = *it->second;
          const size_t width = size_t{logged.dim} + logged.state_dim;
          if (logged.dim != table.dim() ||
              logged.state_dim != table.state_dim()) {
            return absl::DataLossError(absl::StrCat(
                "the push log's rows of table '", table.config().name,
                "' have ", width, " floats, the table's ",
                table.dim() + table.state_dim()));
          }
          if (table.has_memory_budget()) {
            // A row past the budget would not be kept in memory, and it
            // is not on disk yet.
            return absl::FailedPreconditionError(absl::StrCat(
                "table '", table.config().name,
                "' now has a memory budget, and the push log holds rows of "
                "it: restart once without the budget, so that they are "
                "written"));
          }
          for (size_t k = 0; k < logged.keys.size(); ++k) {
            const float* row = logged.rows + k * width;
            table.PutRow(logged.keys[k], row, row + logged.dim);
          }
          table.MarkDirty(logged.keys);
          rows += logged.keys.size();
        }
        if (!record.client_id.empty()) {
          deduplicator_.Claim(record.client_id, record.client_sequence);
        }
        if (record.replication.sequence > 0) {
          replication = record.replication;
        }
        ++records;
        return absl::OkStatus();
      });
  if (!replayed.ok()) {
    return absl::Status(
        replayed.code(),
        absl::StrCat("cannot replay the push log in ", dir,
                     " (pushes acknowledged before the last stop): ",
                     replayed.message()));
  }
  {
    absl::MutexLock order_lock(&push_order_mu_);
    logged_replication_ = replication;
  }
  STRATA_LOG(INFO, "store")
      << "replayed the push log: " << records << " pushes, " << rows << " rows";
  absl::Status flushed = FlushLocked();
  if (!flushed.ok()) {
    STRATA_LOG(WARNING, "store")
        << "the replayed pushes stay in memory and in the push log until a "
           "flush works: "
        << flushed;
  }
  return absl::OkStatus();
}

void RocksDbEmbeddingStore::FlushLoop() {
  // A failed flush logs itself (WriteCutLocked), and is retried here.
  while (
      !stop_flusher_.WaitForNotificationWithTimeout(options_.flush_interval)) {
    Flush().IgnoreError();
  }
}

uint64_t RocksDbEmbeddingStore::TotalRows() {
  absl::ReaderMutexLock lock(&tables_mu_);
  uint64_t rows = 0;
  for (const auto& [name, table] : tables_) rows += table->num_rows();
  return rows;
}

absl::StatusOr<std::string> RocksDbEmbeddingStore::StartCheckpointLocked(
    absl::string_view checkpoint_id) {
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  if (files_.CheckpointExists(checkpoint_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint '", checkpoint_id, "' already exists"));
  }
  // Buffered rows (kPeriodic) reach the database, and the tracker of
  // changed rows, first.
  STRATA_RETURN_IF_ERROR(FlushLocked());
  const std::string staging = files_.CheckpointStagingDir(checkpoint_id);
  STRATA_RETURN_IF_ERROR(options_.file_system->DeleteRecursively(staging));
  return staging;
}

absl::Status RocksDbEmbeddingStore::PublishCheckpointLocked(
    const std::string& staging, const CheckpointInfo& info) {
  STRATA_RETURN_IF_ERROR(files_.PublishCheckpoint(staging, info));
  // The next delta builds on this checkpoint.
  changed_rows_.Restart(info.checkpoint_id);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo> RocksDbEmbeddingStore::Checkpoint(
    absl::string_view checkpoint_id, uint64_t global_step) {
  STRATA_RETURN_IF_ERROR(RocksDbFiles::ValidateCheckpointId(checkpoint_id));
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock lock(&commit_mu_);
  STRATA_ASSIGN_OR_RETURN(const std::string staging,
                          StartCheckpointLocked(checkpoint_id));
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  if (s.ok()) {
    // A log size of 0 flushes the memtables, so the checkpoint holds no WAL.
    s = checkpoint->CreateCheckpoint(staging, /*log_size_for_flush=*/0);
  }
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("checkpoint failed: ", s.ToString()));
  }
  CheckpointInfo info;
  info.checkpoint_id = std::string(checkpoint_id);
  info.global_step = global_step;
  info.num_rows = TotalRows();
  STRATA_RETURN_IF_ERROR(PublishCheckpointLocked(staging, info));
  STRATA_LOG(INFO, "store") << "checkpoint '" << checkpoint_id << "' at step "
                            << global_step << ", " << info.num_rows << " rows";
  return info;
}

absl::StatusOr<CheckpointInfo> RocksDbEmbeddingStore::CheckpointIncremental(
    absl::string_view checkpoint_id, uint64_t global_step) {
  STRATA_RETURN_IF_ERROR(RocksDbFiles::ValidateCheckpointId(checkpoint_id));
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  const std::string parent = changed_rows_.base_id();
  if (parent.empty()) {
    return absl::FailedPreconditionError(
        "no checkpoint taken or restored since the shard started: an "
        "incremental checkpoint needs one to build on (take a full one)");
  }
  if (changed_rows_.overflowed()) {
    return absl::FailedPreconditionError(
        absl::StrCat("more than ", ChangedRowTracker::kMaxTrackedRows,
                     " rows changed since checkpoint '", parent,
                     "': take a full checkpoint"));
  }
  if (!files_.CheckpointExists(parent)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", parent,
        "', which an incremental checkpoint would build on, is gone"));
  }
  STRATA_ASSIGN_OR_RETURN(const std::string staging,
                          StartCheckpointLocked(checkpoint_id));
  STRATA_RETURN_IF_ERROR(options_.file_system->CreateDirs(staging));
  const std::vector<std::string> rows = changed_rows_.SortedKeys();
  STRATA_RETURN_IF_ERROR(WriteDelta(db_.get(), handles_, rows, staging));
  CheckpointInfo info;
  info.checkpoint_id = std::string(checkpoint_id);
  info.global_step = global_step;
  info.num_rows = TotalRows();
  info.parent_id = parent;
  info.delta_rows = rows.size();
  STRATA_RETURN_IF_ERROR(PublishCheckpointLocked(staging, info));
  STRATA_LOG(INFO, "store")
      << "incremental checkpoint '" << checkpoint_id << "' at step "
      << global_step << " on '" << parent << "': " << info.delta_rows
      << " changed rows of " << info.num_rows;
  return info;
}

absl::StatusOr<CheckpointInfo> RocksDbEmbeddingStore::Restore(
    absl::string_view checkpoint_id) {
  STRATA_RETURN_IF_ERROR(RocksDbFiles::ValidateCheckpointId(checkpoint_id));
  absl::MutexLock flush_lock(&flush_mu_);
  absl::MutexLock lock(&commit_mu_);
  STRATA_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> chain,
                          files_.RestoreChain(checkpoint_id));
  CheckpointInfo info = chain.back();
  std::vector<std::string> deltas;
  for (size_t i = 1; i < chain.size(); ++i) {
    deltas.push_back(files_.CheckpointDir(chain[i].checkpoint_id));
  }
  STRATA_RETURN_IF_ERROR(FlushLocked());
  CloseDbLocked();
  absl::Status swapped = files_.SwapInCheckpoint(
      chain.front().checkpoint_id, [&](const std::string& copy) {
        return deltas.empty() ? absl::OkStatus() : ApplyDeltas(copy, deltas);
      });
  if (!swapped.ok()) {
    // A failed copy or delta leaves db/ as it was: reopen it. (Without db/,
    // the next start finishes or rolls back the swap; opening here would
    // create an empty store.)
    if (!options_.file_system->Exists(files_.db_dir())) return swapped;
    absl::Status reopened = OpenDbLocked();
    if (!reopened.ok()) {
      STRATA_LOG(ERROR, "store") << "cannot reopen the store: " << reopened;
    }
    return swapped;
  }
  absl::Status opened =
      OpenDbLocked(absl::StrCat("checkpoint '", checkpoint_id, "'"));
  if (!opened.ok()) {
    // The checkpoint does not open: put the previous database back.
    CloseDbLocked();
    absl::Status rolled_back = files_.RollBackSwap();
    absl::Status reopened = rolled_back.ok() ? OpenDbLocked() : rolled_back;
    STRATA_LOG(ERROR, "store")
        << "restore of checkpoint '" << checkpoint_id << "' failed (" << opened
        << "); previous state " << (reopened.ok() ? "kept" : "lost: ")
        << (reopened.ok() ? "" : reopened.ToString());
    return absl::Status(
        opened.code(),
        absl::StrCat("restore of checkpoint '", checkpoint_id,
                     "' failed, previous state kept: ", opened.message()));
  }
  // The rows changed wholesale: followers must start over from a snapshot,
  // and deltas build on the restored checkpoint.
  change_log_.StartNewIncarnation();
  changed_rows_.Restart(info.checkpoint_id);
  if (push_log_ != nullptr) {
    // The push log was emptied by the flush above; the position is the
    // checkpoint's.
    STRATA_ASSIGN_OR_RETURN(const ReplicationPosition restored,
                            ReadReplicationPositionLocked());
    absl::MutexLock order_lock(&push_order_mu_);
    logged_replication_ = restored;
  }
  STRATA_RETURN_IF_ERROR(files_.FinishSwap());
  info.num_rows = TotalRows();
  STRATA_LOG(INFO, "store")
      << "restored checkpoint '" << checkpoint_id << "' of step "
      << info.global_step << ", " << info.num_rows << " rows";
  return info;
}

}  // namespace embedding_internal
}  // namespace strata
