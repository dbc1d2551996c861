#ifndef STRATA_EMBEDDING_INTERNAL_ROCKSDB_EMBEDDING_STORE_H_
#define STRATA_EMBEDDING_INTERNAL_ROCKSDB_EMBEDDING_STORE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "embedding/change_log.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_table.h"
#include "embedding/internal/checkpoint_delta.h"
#include "embedding/internal/push_deduplicator.h"
#include "embedding/internal/push_log.h"
#include "embedding/internal/rocksdb_files.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace strata {
namespace embedding_internal {

// Key prefix of the push-deduplication windows in the "default" family.
inline constexpr char kClientPrefix[] = "client/";
// Key of the last replicated update's position in the "default" family.
inline constexpr char kReplicationPositionKey[] = "replication/position";

// 16 bytes: term and sequence, in the machine's byte order (the store is
// not moved between machines of different byte orders).
std::string EncodeReplicationPosition(const ReplicationPosition& position);

inline rocksdb::Slice FloatSlice(const float* data, size_t count) {
  return rocksdb::Slice(reinterpret_cast<const char*>(data),
                        count * sizeof(float));
}

class RocksDbValueSnapshotReader;

// EmbeddingStore on RocksDB: rows in memory (EmbeddingTable), made durable
// in three column families: "default" (tables, push windows), "values" and
// "optimizer" (embedding/storage_format.h). The data path is in
// rocksdb_embedding_store.cc; flushes, checkpoints, restore and snapshots in
// rocksdb_embedding_store_durability.cc. Thread-safe.
class RocksDbEmbeddingStore final : public EmbeddingStore {
 public:
  explicit RocksDbEmbeddingStore(const EmbeddingStoreOptions& options)
      : options_(options),
        files_(options.data_dir, options.file_system),
        deduplicator_(options.clock),
        // In kSync mode a push reaches the change stream only once the
        // fsync that makes it durable has succeeded.
        change_log_(
            options.change_log_bytes, options.clock,
            /*hold_until_published=*/options.durability == Durability::kSync) {}

  ~RocksDbEmbeddingStore() override {
    if (evictor_.joinable()) {
      stop_evictor_.Notify();
      evictor_.join();
    }
    if (flusher_.joinable()) {
      stop_flusher_.Notify();
      flusher_.join();
    }
    absl::Status flushed = Flush();
    if (!flushed.ok()) {
      STRATA_LOG(ERROR, "store") << "final flush failed: " << flushed;
    }
    absl::MutexLock lock(&commit_mu_);
    CloseDbLocked();
  }

  absl::Status Init() {
    absl::MutexLock lock(&commit_mu_);
    STRATA_RETURN_IF_ERROR(files_.Prepare());
    STRATA_RETURN_IF_ERROR(OpenDbLocked());
    if (options_.durability == Durability::kGroup) {
      STRATA_RETURN_IF_ERROR(StartPushLogLocked());
    }
    if (BuffersPushes()) {
      flusher_ = std::thread([this] { FlushLoop(); });
    }
    if (options_.eviction_interval > absl::ZeroDuration()) {
      evictor_ = std::thread([this] { EvictionLoop(); });
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> CreateTable(const EmbeddingTableConfig& config) override;
  std::vector<TableStats> ListTables() override;
  absl::StatusOr<EmbeddingTableConfig> GetTableConfig(
      absl::string_view table) override;
  absl::Status Lookup(absl::string_view table, absl::Span<const FeatureId> keys,
                      absl::Span<float> out) override;
  absl::StatusOr<bool> ApplyGradients(absl::Span<const GradientBatch> batches,
                                      const PushId& id) override;
  bool WasPushApplied(const PushId& id) override;
  absl::Status Flush() override;
  absl::StatusOr<uint64_t> EvictNow() override;
  absl::StatusOr<uint64_t> ExpirePushWindows() override;
  absl::StatusOr<CheckpointInfo> Checkpoint(absl::string_view checkpoint_id,
                                            uint64_t global_step) override;
  absl::StatusOr<CheckpointInfo> CheckpointIncremental(
      absl::string_view checkpoint_id, uint64_t global_step) override;
  absl::StatusOr<CheckpointInfo> Restore(
      absl::string_view checkpoint_id) override;
  std::vector<std::string> ListCheckpoints() override {
    return files_.ListCheckpoints();
  }
  Durability durability() const override { return options_.durability; }
  StorageStats GetStorageStats() override;
  absl::StatusOr<ReplicationPosition> ReadReplicationPosition() override;
  absl::Status RecordReplicationPosition(
      const ReplicationPosition& position) override;
  const ChangeLog& change_log() const override { return change_log_; }
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> OpenValueSnapshot(
      absl::Span<const std::string> tables) override;
  absl::StatusOr<RowBlock> ExportRows(absl::string_view table,
                                      const RowSelector& select,
                                      ExportCursor& cursor,
                                      size_t max_rows) override;
  absl::StatusOr<RowBlock> ReadRows(absl::string_view table,
                                    absl::Span<const FeatureId> keys) override;
  absl::Status WriteRows(const RowBlock& rows) override;
  absl::StatusOr<uint64_t> DropRows(absl::string_view table,
                                    const RowSelector& select) override;

 private:
  // Opens the database and loads its tables. `what` names the database in
  // errors (default: the store in its data directory).
  absl::Status OpenDbLocked(absl::string_view what = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Opens the database only (db_, handles_).
  absl::Status OpenRocksDbLocked(absl::string_view what = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // After a failed write RocksDB refuses writes until it resumes: resumes
  // it (or reopens the database, keeping memory as it is). UNAVAILABLE
  // while that cannot be done yet. Called before the writes that hold
  // commit_mu_ exclusively.
  absl::Status RecoverWritesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // What a write gets while the store is read-only (a full disk at open).
  absl::Status ReadOnlyError() const;
  void CloseDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  using TableMap =
      absl::flat_hash_map<std::string, std::unique_ptr<EmbeddingTable>>;
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  absl::StatusOr<uint64_t> LoadRowsLocked(TableMap& tables)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // UNAVAILABLE while the database is closed (after a failed restore).
  absl::Status CheckOpenLocked() ABSL_SHARED_LOCKS_REQUIRED(commit_mu_) {
    if (db_ != nullptr) return absl::OkStatus();
    return absl::UnavailableError(
        "the store is closed: it could not be reopened (after a restore or "
        "a failed write)");
  }
  // Whether pushes reach RocksDB only through the flush of dirty rows:
  // kPeriodic, and kGroup, whose pushes go to the push log first.
  bool BuffersPushes() const {
    return options_.durability != Durability::kSync;
  }
  // kGroup pushes go to the push log, unless a table has a memory budget:
  // then rows must be on disk before they can leave memory, so pushes are
  // written through to RocksDB, as before the log.
  bool LogsPushesLocked() const ABSL_SHARED_LOCKS_REQUIRED(commit_mu_) {
    return push_log_ != nullptr && !skiplist_memtables_;
  }
  // kGroup: opens the push log and, when a process died with pushes in it,
  // puts their rows back in memory as dirty rows, claims their push windows
  // again, and flushes (which deletes the replayed segments).
  absl::Status StartPushLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // kGroup: appends a staged push to the push log.
  absl::Status AppendToPushLogLocked(
      absl::Span<EmbeddingTable* const> tables,
      absl::Span<const EmbeddingTable::StagedRows> staged, const PushId& id)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(push_order_mu_);
  // What RocksDB holds as the last replicated push's position.
  absl::StatusOr<ReplicationPosition> ReadReplicationPositionLocked()
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Writes the rows updated since the last flush (kPeriodic, kGroup).
  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // What a flush takes from memory to write: the rows and push windows
  // updated since the last flush, with what it needs to give them back
  // (as still to write) when the write fails.
  struct FlushCut {
    rocksdb::WriteBatch write;
    std::vector<std::pair<EmbeddingTable*, std::vector<FeatureId>>> rows;
    std::vector<std::string> clients;
    uint64_t num_rows = 0;
    // kGroup: the push log's first segment after the cut; those before it
    // are deleted once the cut is written.
    uint64_t log_segment = 0;
  };
  void CollectDirtyLocked(FlushCut& cut)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Writes `cut` (synced). When that fails, its rows and windows are marked
  // to write again, and pushes are refused past options.max_unwritten_rows.
  absl::Status WriteCutLocked(FlushCut& cut)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Every write to RocksDB goes through it; a failure is counted and kept
  // for GetStorageStats.
  absl::Status WriteLocked(rocksdb::WriteBatch& batch, bool sync)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  void NoteWriteError(const absl::Status& error);
  // A write worked: the last error is no longer the store's state.
  void NoteWriteWorked();
  // kSync: makes the change `through` durable and visible (0: every change
  // appended so far). Returns at once when a later fsync already covered
  // it; otherwise fsyncs the log, then publishes every change appended
  // before the fsync. Once an fsync (or synced write) failed, it and every
  // push, table creation and snapshot are refused until a restart (the page
  // cache may have dropped what the log held), and nothing more is
  // published. Syncs are serialized by sync_mu_, so that no fsync that
  // follows a failed one publishes what the failed one covered.
  absl::Status SyncLogAndPublishLocked(uint64_t through)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // UNAVAILABLE once an fsync failed (kSync).
  absl::Status CheckFsyncHealthy();
  // The two push paths, each under one scoped lock of commit_mu_: kSync and
  // kGroup hold it exclusively and write each push before it reaches
  // memory; kPeriodic holds it shared and updates memory only.
  // *sequence: the change record of the push (0 for a duplicate).
  absl::StatusOr<bool> ApplyGradientsSerially(
      absl::Span<const GradientBatch> batches, const PushId& id,
      uint64_t* sequence);
  // kGroup with the push log: like ApplyGradientsSerially, but holding
  // commit_mu_ shared (and push_order_mu_), so that a flush's write does
  // not stop pushes. nullopt when the store writes pushes through instead
  // (LogsPushesLocked).
  absl::StatusOr<std::optional<bool>> ApplyGradientsToLog(
      absl::Span<const GradientBatch> batches, const PushId& id);
  // The body of both: stages the push, writes it (to the push log when
  // `logged`, else to RocksDB), and commits it to memory, the push window
  // and the change log.
  absl::StatusOr<bool> StageAndCommitLocked(
      absl::Span<const GradientBatch> batches, const PushId& id, bool logged,
      uint64_t* sequence) ABSL_SHARED_LOCKS_REQUIRED(commit_mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(push_order_mu_);
  // kSync, and kGroup writing through: writes a staged push's rows, its
  // push window and its replication position to RocksDB (not synced).
  absl::Status WriteStagedLocked(
      absl::Span<EmbeddingTable* const> tables,
      absl::Span<const EmbeddingTable::StagedRows> staged, const PushId& id)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  absl::StatusOr<bool> ApplyGradientsConcurrently(
      absl::Span<const GradientBatch> batches, const PushId& id);
  // The table of each batch, after checking the batch (known table,
  // gradient count, finite values).
  absl::StatusOr<std::vector<EmbeddingTable*>> FindPushTablesLocked(
      absl::Span<const GradientBatch> batches)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // UNAVAILABLE when pushes must wait for the disk: a failed flush left too
  // many rows to write, or a failed fsync left memory ahead of the disk.
  absl::Status CheckWritableLocked() ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  uint64_t TotalRows();
  // Checks that `checkpoint_id` is free, flushes, and returns an empty
  // staging directory path for it.
  absl::StatusOr<std::string> StartCheckpointLocked(
      absl::string_view checkpoint_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Moves the checkpoint in place; the next delta builds on it.
  absl::Status PublishCheckpointLocked(const std::string& staging,
                                       const CheckpointInfo& info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);

  // The cold tier (rocksdb_embedding_store_cold.cc): tables with a memory
  // budget keep some rows on disk only.
  // Reads the rows at `misses` (positions in `keys`) of `table` from disk
  // into `out`; rows never written get the initializer's value.
  absl::Status ReadColdRowsLocked(const EmbeddingTable& table,
                                  absl::Span<const FeatureId> keys,
                                  absl::Span<const uint32_t> misses, float* out)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Loads a row of `table` from disk, for EmbeddingTable::ApplyGradients;
  // a read error goes to `*error` (the first one).
  EmbeddingTable::RowLoader ColdRowLoaderLocked(const EmbeddingTable& table,
                                                absl::Status* error)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Point reads need a sorted memtable: reopens the database with skip-list
  // memtables if it uses vectors (a table with a memory budget appeared).
  absl::Status EnablePointReads() ABSL_LOCKS_EXCLUDED(flush_mu_, commit_mu_);
  friend class RocksDbValueSnapshotReader;
  // The next chunk of `reader` (ValueSnapshotReader::Next).
  absl::StatusOr<bool> ReadSnapshotChunk(RocksDbValueSnapshotReader& reader,
                                         ChangedRows& chunk)
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  // Forgets `reader` and releases its RocksDB snapshot.
  void CloseValueSnapshot(RocksDbValueSnapshotReader* reader)
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  // Before the database closes: releases every open reader's snapshot (its
  // next chunk is ABORTED).
  void ReleaseValueSnapshotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Gives each table without a memory budget of its own an equal share of
  // the shard's budget (what the tables with their own leave, at least the
  // minimum budget).
  void ShareShardBudget(TableMap& tables);
  // Whether a table record in the open database has a memory budget.
  bool AnyBudgetedTableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  void FlushLoop();
  // Bucket moves (rocksdb_embedding_store_moves.cc).
  // Appends the rows of `keys` to `block` (absent ones to block.absent):
  // from memory, else (a table with a memory budget) from disk.
  absl::Status ReadRowsLocked(const EmbeddingTable& table,
                              absl::Span<const FeatureId> keys, RowBlock& block)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // The keys of `table` on disk from `start` on that `select` takes: at
  // most `max_keys`, scanning at most `max_scanned` rows. Sets *next to the
  // key to go on from, *end when the table's last row was scanned.
  std::vector<FeatureId> ScanDiskKeysLocked(const EmbeddingTable& table,
                                            const RowSelector& select,
                                            FeatureId start, size_t max_keys,
                                            size_t max_scanned, FeatureId* next,
                                            bool* end)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Which of `keys` have a row on disk.
  absl::StatusOr<std::vector<bool>> StoredOnDiskLocked(
      const EmbeddingTable& table, absl::Span<const FeatureId> keys)
      ABSL_SHARED_LOCKS_REQUIRED(commit_mu_);
  // Eviction (rocksdb_embedding_store_eviction.cc).
  void EvictionLoop();
  // Deletes the candidates of one stripe that still qualify, from memory
  // and disk, and logs them. Returns how many.
  absl::StatusOr<uint64_t> EvictStripe(const std::string& table, size_t stripe,
                                       absl::Span<const FeatureId> candidates);

  EmbeddingTable* FindTable(absl::string_view name)
      ABSL_SHARED_LOCKS_REQUIRED(tables_mu_) {
    auto it = tables_.find(name);
    return it == tables_.end() ? nullptr : it->second.get();
  }

  const EmbeddingStoreOptions options_;
  RocksDbFiles files_;

  // Pushes in kSync mode (and kGroup writing through) hold it exclusively
  // so that rows reach the log in the order they were updated; in kPeriodic
  // mode, and kGroup with the push log (ordered by push_order_mu_), they
  // hold it shared and the flush holds it exclusively, to write a
  // consistent cut. Checkpoint
  // and Restore hold it exclusively. Lock order: commit_mu_, tables_mu_,
  // stripe locks.
  // One eviction sweep at a time. Taken before flush_mu_.
  absl::Mutex evict_mu_ ABSL_ACQUIRED_BEFORE(flush_mu_);
  // Serializes flushes, so that their writes reach RocksDB in cut order.
  // Taken before commit_mu_. Evictions hold it too, so that a flush never
  // writes back a row deleted after its cut.
  absl::Mutex flush_mu_ ABSL_ACQUIRED_BEFORE(commit_mu_);
  absl::Mutex commit_mu_;
  // Held by every kSync and kGroup push while it stages, writes and
  // commits, so that pushes reach the log(s) and memory in one order: under
  // commit_mu_ held exclusively (kSync, and kGroup writing through) or
  // shared (kGroup with the push log, so that a flush's write runs beside
  // pushes).
  absl::Mutex push_order_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  // kSync's fsyncs of the log, one at a time; taken under commit_mu_.
  absl::Mutex sync_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(commit_mu_);
  // Skip-list memtables (point reads) instead of vectors (fast appends).
  bool skiplist_memtables_ ABSL_GUARDED_BY(commit_mu_) = false;
  // One block cache for every reopen, so that its size holds.
  std::shared_ptr<rocksdb::Cache> block_cache_ ABSL_GUARDED_BY(commit_mu_);
  std::vector<rocksdb::ColumnFamilyHandle*> handles_
      ABSL_GUARDED_BY(commit_mu_);

  absl::Mutex tables_mu_;
  TableMap tables_ ABSL_GUARDED_BY(tables_mu_);
  TableId next_table_id_ ABSL_GUARDED_BY(tables_mu_) = 1;

  // Health of writes (GetStorageStats, and refusing pushes).
  absl::Mutex write_error_mu_;
  std::string last_write_error_ ABSL_GUARDED_BY(write_error_mu_);
  std::atomic<bool> write_error_set_{false};
  std::atomic<uint64_t> failed_writes_{0};
  // kPeriodic: rows the last failed flush kept to write again; 0 after a
  // flush that worked.
  std::atomic<uint64_t> unwritten_rows_{0};
  std::atomic<uint64_t> failed_flushes_in_a_row_{0};
  // kSync: an fsync of the log failed after a push reached memory, which
  // is now ahead of the disk; pushes are refused until a restart reloads
  // what the disk has.
  std::atomic<bool> fsync_failed_{false};
  // A write failed since RecoverWritesLocked last worked.
  std::atomic<bool> needs_recovery_{false};
  // The last failed write found the disk full (RESOURCE_EXHAUSTED).
  std::atomic<bool> disk_full_{false};
  // The database was opened read-only (the disk was full at open).
  bool read_only_ ABSL_GUARDED_BY(commit_mu_) = false;
  absl::Time last_reopen_attempt_ ABSL_GUARDED_BY(commit_mu_) =
      absl::InfinitePast();

  // Open value snapshots: closing the database releases their RocksDB
  // snapshots first (RocksDB must not close with any left).
  absl::Mutex snapshot_readers_mu_ ABSL_ACQUIRED_AFTER(commit_mu_);
  absl::flat_hash_set<RocksDbValueSnapshotReader*> snapshot_readers_
      ABSL_GUARDED_BY(snapshot_readers_mu_);

  PushDeduplicator deduplicator_;
  // kGroup: each push's rows, appended before it is acknowledged (null in
  // the other modes). Appends hold push_order_mu_, as the whole push does,
  // so the log's order is the order rows changed in.
  std::unique_ptr<PushLog> push_log_;
  // kSync and kGroup: the staging buffers of pushes, reused from one push
  // to the next (pushes hold push_order_mu_).
  std::vector<EmbeddingTable::StagedRows> staged_scratch_
      ABSL_GUARDED_BY(push_order_mu_);
  // kGroup: the position of the last replicated push applied, written to
  // RocksDB by each flush (the push log holds it until then).
  ReplicationPosition logged_replication_ ABSL_GUARDED_BY(push_order_mu_);
  // Rows written since the last checkpoint, for incremental checkpoints.
  ChangedRowTracker changed_rows_;
  ChangeLog change_log_;
  absl::Notification stop_flusher_;
  std::thread flusher_;
  absl::Notification stop_evictor_;
  std::thread evictor_;
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_ROCKSDB_EMBEDDING_STORE_H_
