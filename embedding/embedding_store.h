#ifndef STRATA_EMBEDDING_EMBEDDING_STORE_H_
#define STRATA_EMBEDDING_EMBEDDING_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "embedding/change_log.h"
#include "embedding/replication_position.h"
#include "embedding/table_config.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace strata {

// What an acknowledged push survives.
enum class Durability {
  // Each acknowledged push is fsynced to the write-ahead log before the
  // acknowledgement: survives kill -9 and power loss. Concurrent pushes share
  // fsyncs (group commit).
  kSync,
  // Each acknowledged push is in the write-ahead log in the OS page cache:
  // survives kill -9 of the process, not power loss.
  kGroup,
  // Updated rows are written every flush interval: a crash loses at most the
  // pushes of the last interval, and never applies a push twice.
  kPeriodic,
};

absl::string_view DurabilityName(Durability durability);
absl::StatusOr<Durability> ParseDurability(absl::string_view name);

struct EmbeddingStoreOptions {
  // Directory of the store; created when missing. Required.
  std::string data_dir;
  // Default: kGroup.
  Durability durability = Durability::kGroup;
  // kPeriodic and kGroup: how often updated rows are written (under kGroup
  // the push log is then emptied). Default: 1 s.
  absl::Duration flush_interval = absl::Seconds(1);
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
  // Our own files (checkpoint manifests). Default: FileSystem::Default().
  FileSystem* file_system = FileSystem::Default();
  // RocksDB's environment; tests may pass rocksdb::NewMemEnv(). Default:
  // rocksdb::Env::Default().
  rocksdb::Env* rocksdb_env = nullptr;
  // Memory for the rows of every table of the shard: tables without a
  // memory budget of their own share what the others leave, equally; rows
  // past a table's share live on disk only. 0: no shard budget.
  uint64_t memory_budget_bytes = 0;
  // RocksDB's memtable size (each column family may hold two). Default:
  // 64 MiB.
  size_t write_buffer_bytes = size_t{64} << 20;
  // RocksDB's block cache, which rows read from disk pass through. Default:
  // 32 MiB.
  size_t block_cache_bytes = size_t{32} << 20;
  // Recent updates kept for the change stream. Default: 256 MiB.
  size_t change_log_bytes = size_t{256} << 20;
  // kPeriodic and kGroup: while flushes fail, pushes are refused (UNAVAILABLE)
  // once more rows than this wait to be written. Default: 4M rows.
  uint64_t max_unwritten_rows = uint64_t{1} << 22;
  // kGroup: while flushes fail the push log keeps growing; past this many
  // bytes pushes are refused (UNAVAILABLE) until a flush works.
  uint64_t max_push_log_bytes = uint64_t{8} << 30;
  // Push windows (deduplication of retried pushes): a client's window is
  // forgotten (in memory and on disk) once unused for push_window_ttl, and
  // the least recently used go past max_push_windows; a retry of a push
  // older than that is applied again. The sweep below runs it. Defaults:
  // 1 hour, 100000 windows.
  absl::Duration push_window_ttl = absl::Hours(1);
  size_t max_push_windows = 100000;
  // How often a background sweep deletes the rows that tables' eviction
  // policies select; zero or less: never (EvictNow() only). Default: 10 s.
  absl::Duration eviction_interval = absl::Seconds(10);
};

// What the storage engine reports about itself, for /metrics. Summed over
// the store's column families.
struct StorageStats {
  uint64_t memtable_bytes = 0;            // active and immutable memtables
  uint64_t immutable_memtables = 0;       // full, waiting to be flushed
  uint64_t pending_compaction_bytes = 0;  // compaction's estimated backlog
  uint64_t running_flushes = 0;
  uint64_t running_compactions = 0;
  uint64_t sst_bytes = 0;          // every SST file on disk
  uint64_t block_cache_bytes = 0;  // block cache in use
  // Writes to RocksDB that failed since the store opened (pushes, flushes,
  // table records).
  uint64_t failed_writes = 0;
  // kPeriodic and kGroup: rows the last failed flush kept in memory to
  // write again; 0 once a flush succeeds.
  uint64_t unwritten_rows = 0;
  // kGroup: bytes of pushes in the push log, which the next flush that
  // works writes to RocksDB and deletes.
  uint64_t push_log_bytes = 0;
  // The last write's error; empty once a write succeeds again.
  std::string write_error;
};

// The values (no optimizer state) of some tables at one sequence of the
// change log, read a chunk at a time: what a new follower starts from. It
// holds one chunk, not a copy of the tables, however large they are and
// however slowly it is read.
class ValueSnapshotReader {
 public:
  ValueSnapshotReader(uint64_t incarnation, uint64_t sequence,
                      std::vector<EmbeddingTableConfig> tables)
      : incarnation_(incarnation),
        sequence_(sequence),
        tables_(std::move(tables)) {}
  virtual ~ValueSnapshotReader() = default;
  ValueSnapshotReader(const ValueSnapshotReader&) = delete;
  ValueSnapshotReader& operator=(const ValueSnapshotReader&) = delete;

  uint64_t incarnation() const { return incarnation_; }
  uint64_t sequence() const { return sequence_; }
  const std::vector<EmbeddingTableConfig>& tables() const { return tables_; }

  // Replaces `chunk` with the next rows of one table (at most
  // kSnapshotChunkRows rows and kSnapshotChunkBytes of values, at least one
  // row); false once every row was read. ABORTED when the store was
  // restored or reopened meanwhile: the snapshot is gone, start over.
  virtual absl::StatusOr<bool> Next(ChangedRows& chunk) = 0;

 private:
  const uint64_t incarnation_;
  const uint64_t sequence_;
  const std::vector<EmbeddingTableConfig> tables_;
};
inline constexpr size_t kSnapshotChunkRows = 4096;
inline constexpr size_t kSnapshotChunkBytes = size_t{4} << 20;

struct TableStats {
  EmbeddingTableConfig config;
  uint64_t num_rows = 0;
  uint64_t memory_bytes = 0;
  // Since the store opened (or restored): keys given a row by a push,
  // gradients dropped because admission refused their key, rows evicted.
  uint64_t admitted_keys = 0;
  uint64_t rejected_gradients = 0;
  uint64_t evicted_rows = 0;
  // Of num_rows, those in memory; the others are on disk only (tables with
  // a memory budget).
  uint64_t rows_in_memory = 0;
};

// The gradients of `keys` of one table, keys.size() * dim floats.
struct GradientBatch {
  absl::string_view table;
  absl::Span<const FeatureId> keys;
  absl::Span<const float> gradients;
  // The trainer's global step of the gradients; 0: unknown.
  uint64_t global_step = 0;
};

// The longest client id a push may carry: its dedup window is kept (and
// stored) under it.
inline constexpr size_t kMaxClientIdBytes = 256;

// Identifies a push for deduplication. An empty client_id disables it.
struct PushId {
  PushId() = default;
  PushId(std::string client_id, uint64_t sequence,
         ReplicationPosition replication = {})
      : client_id(std::move(client_id)),
        sequence(sequence),
        replication(replication) {}

  std::string client_id;
  uint64_t sequence = 0;
  // In a replica group: the push's place in the group's log, written in the
  // same RocksDB write as the push (sync and group durability), so that a
  // replica knows after a crash how far it got. Zero: not recorded.
  ReplicationPosition replication;
};

struct CheckpointInfo {
  std::string checkpoint_id;
  uint64_t global_step = 0;
  uint64_t num_rows = 0;
  // An incremental checkpoint: the checkpoint it applies on, and the rows it
  // holds (changed or deleted since then). Empty and 0 for a full one.
  std::string parent_id;
  uint64_t delta_rows = 0;
};

// Rows of one table with their optimizer state, as a bucket move carries
// them from the shard that owned their bucket to the one that will.
struct RowBlock {
  std::string table;
  std::vector<FeatureId> keys;
  // keys.size() * dim floats, row-major in key order.
  std::vector<float> values;
  // keys.size() * state_dim floats (the optimizer's state; none for SGD).
  std::vector<float> states;
  // Keys that have no row (any more): the receiver deletes its copy.
  std::vector<FeatureId> absent;
};

// Chooses the rows a bucket move carries (by their key's bucket).
using RowSelector = std::function<bool(FeatureId key)>;

// Where ExportRows stands in a table: the rows in memory stripe by stripe
// (each stripe's selected keys in key order), then, for a table with a
// memory budget, those on disk only, in key order.
struct ExportCursor {
  uint32_t stripe = 0;
  uint64_t offset = 0;
  FeatureId disk_key = 0;
  bool done = false;
};

// The rows of one shard: tables in memory, persisted in RocksDB (values and
// optimizer state in separate column families), with durability as chosen,
// automatic recovery on open, consistent checkpoints and restore.
// Thread-safe.
//
// Example:
//   EmbeddingStoreOptions options;
//   options.data_dir = "/var/lib/strata/shard0";
//   auto store = EmbeddingStore::Open(options);
//   (*store)->CreateTable(config);
//   (*store)->Lookup("user", keys, absl::MakeSpan(values));
class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;

  // Opens (or creates) the store in options.data_dir and loads its rows.
  // Errors: INVALID_ARGUMENT for bad options, DATA_LOSS for a corrupt store,
  // INTERNAL or NOT_FOUND when the directory cannot be used.
  static absl::StatusOr<std::unique_ptr<EmbeddingStore>> Open(
      const EmbeddingStoreOptions& options);

  // Returns true if created, false if an identical table existed.
  // ALREADY_EXISTS when a table of that name has another config.
  virtual absl::StatusOr<bool> CreateTable(
      const EmbeddingTableConfig& config) = 0;
  virtual std::vector<TableStats> ListTables() = 0;
  // NOT_FOUND for an unknown table.
  virtual absl::StatusOr<EmbeddingTableConfig> GetTableConfig(
      absl::string_view table) = 0;

  // Writes keys.size() * dim floats to `out`. NOT_FOUND for an unknown
  // table, INVALID_ARGUMENT when `out` has the wrong size.
  virtual absl::Status Lookup(absl::string_view table,
                              absl::Span<const FeatureId> keys,
                              absl::Span<float> out) = 0;

  // Validates every batch (known table, gradient size, finite values) before
  // applying any, then applies them all. Returns true when `id` was already
  // applied (nothing is applied again). On return the push is as durable as
  // the store's durability mode promises.
  virtual absl::StatusOr<bool> ApplyGradients(
      absl::Span<const GradientBatch> batches, const PushId& id) = 0;
  // Whether the push `id` (a client id and a sequence) was applied here, so
  // that ApplyGradients would take it for a retry; changes nothing.
  virtual bool WasPushApplied(const PushId& id) = 0;

  // The position of the last replicated update written (PushId::replication
  // or RecordReplicationPosition); zero when there is none.
  virtual absl::StatusOr<ReplicationPosition> ReadReplicationPosition() = 0;
  // Writes `position` as the last replicated update (after an update that
  // has no PushId: a table creation, a restore).
  virtual absl::Status RecordReplicationPosition(
      const ReplicationPosition& position) = 0;

  // Writes every buffered update (kPeriodic) to disk.
  virtual absl::Status Flush() = 0;

  // Deletes now the rows that the tables' eviction policies select, from
  // memory and disk, one stripe of a table at a time (what the background
  // sweep does every options.eviction_interval); each stripe's deletions
  // are one change-log record. Returns how many rows were deleted.
  virtual absl::StatusOr<uint64_t> EvictNow() = 0;
  // Forgets now the push windows past options.push_window_ttl and
  // options.max_push_windows (what the background sweep does too). Returns
  // how many.
  virtual absl::StatusOr<uint64_t> ExpirePushWindows() = 0;

  // A consistent checkpoint of every table (values and optimizer state from
  // one point in time), tagged with `global_step`. ALREADY_EXISTS when the id
  // is taken; INVALID_ARGUMENT for a bad id.
  virtual absl::StatusOr<CheckpointInfo> Checkpoint(
      absl::string_view checkpoint_id, uint64_t global_step) = 0;
  // An incremental checkpoint: only the rows written or deleted since the
  // previous checkpoint this store took or restored (its parent), and the
  // table records. Restoring it restores the parent's full checkpoint, then
  // every delta up to this one, in order. FAILED_PRECONDITION when the store
  // has taken or restored no checkpoint since it opened (after a restart,
  // take a full one first) or the parent is gone.
  virtual absl::StatusOr<CheckpointInfo> CheckpointIncremental(
      absl::string_view checkpoint_id, uint64_t global_step) = 0;
  // Replaces every table and row by the checkpoint's (for an incremental
  // one: its full checkpoint with every delta up to it applied). NOT_FOUND
  // when there is no such checkpoint or a link of its chain is missing.
  virtual absl::StatusOr<CheckpointInfo> Restore(
      absl::string_view checkpoint_id) = 0;
  virtual std::vector<std::string> ListCheckpoints() = 0;

  virtual Durability durability() const = 0;

  // Zeros while the store is closed (during a restore).
  virtual StorageStats GetStorageStats() = 0;

  // The numbered updates applied since the store opened (or was restored):
  // every acknowledged push and table creation, with the new row values.
  virtual const ChangeLog& change_log() const = 0;
  // The values of `tables` (every table when empty) consistent with one
  // sequence of change_log(), to be read after the call returns. Pushes
  // wait only while it is opened (in kPeriodic mode, that includes writing
  // the dirty rows). NOT_FOUND for an unknown table. The reader must not
  // outlive the store.
  virtual absl::StatusOr<std::unique_ptr<ValueSnapshotReader>>
  OpenValueSnapshot(absl::Span<const std::string> tables) = 0;

  // Bucket moves (server/bucket_move.h). None of these reaches the change
  // stream: a moved row is not an update, and its deletion at the shard it
  // left must not delete it at the serving PS, which follows its new owner.
  //
  // Up to `max_rows` of the rows of `table` that `select` takes, from
  // `cursor` on (which it advances; cursor.done once every row was read).
  // A row updated while a table is exported may be read before or after
  // the update: the caller tracks such keys and reads them again
  // (ReadRows). NOT_FOUND for an unknown table.
  virtual absl::StatusOr<RowBlock> ExportRows(absl::string_view table,
                                              const RowSelector& select,
                                              ExportCursor& cursor,
                                              size_t max_rows) = 0;
  // The rows of `keys` as they stand (keys without a row in `absent`).
  virtual absl::StatusOr<RowBlock> ReadRows(
      absl::string_view table, absl::Span<const FeatureId> keys) = 0;
  // Writes the rows of `rows` (replacing any of those keys) and deletes
  // those of rows.absent, synced, before they reach memory.
  // INVALID_ARGUMENT when the sizes do not match the table's, NOT_FOUND for
  // an unknown table; a failed write changes nothing in memory.
  virtual absl::Status WriteRows(const RowBlock& rows) = 0;
  // Deletes every row of `table` that `select` takes, from memory and
  // disk. Returns how many.
  virtual absl::StatusOr<uint64_t> DropRows(absl::string_view table,
                                            const RowSelector& select) = 0;
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_EMBEDDING_STORE_H_
