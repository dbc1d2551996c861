// EmbeddingStore on RocksDB, pushes: checking them, applying them in
// memory (periodic durability) or staging, writing and then committing them
// (sync and group), with the checks that refuse pushes while the disk
// cannot take them. See embedding/internal/rocksdb_embedding_store.h.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/float_bounds.h"
#include "common/status_macros.h"
#include "embedding/internal/rocksdb_embedding_store.h"
#include "embedding/storage_format.h"

namespace strata {
namespace embedding_internal {
namespace {

// Squares of larger gradients, summed by Adagrad's and Adam's accumulators,
// could overflow float32 within a training run; with this bound they would
// need 3e20 pushes.
constexpr float kMaxGradientMagnitude = 1e9f;

absl::Status FirstInvalidGradient(const GradientBatch& batch, uint32_t dim) {
  if (batch.keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", batch.table, "': empty batch of keys"));
  }
  if (batch.gradients.size() != batch.keys.size() * size_t{dim}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", batch.table, "': ", batch.gradients.size(),
        " gradient values for ", batch.keys.size(), " keys of dimension ", dim,
        " (expected ", batch.keys.size() * size_t{dim}, ")"));
  }
  if (AllMagnitudesAtMost(batch.gradients, kMaxGradientMagnitude)) {
    return absl::OkStatus();
  }
  for (size_t i = 0; i < batch.gradients.size(); ++i) {
    if (!std::isfinite(batch.gradients[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", batch.table, "': gradient of key ", batch.keys[i / dim],
          " holds a non-finite value (", batch.gradients[i], ")"));
    }
    if (std::fabs(batch.gradients[i]) > kMaxGradientMagnitude) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", batch.table, "': gradient of key ", batch.keys[i / dim],
          " has magnitude ", batch.gradients[i], ", over the limit of ",
          kMaxGradientMagnitude,
          " (summed squares would overflow the optimizer's float32 state)"));
    }
  }
  return absl::OkStatus();
}

// A push whose batches name a table more than once, with those batches
// joined (in order, at the highest of their steps): staging then sees the
// earlier updates of a key in the same push.
struct JoinedPush {
  std::vector<GradientBatch> batches;
  std::vector<EmbeddingTable*> tables;
  std::vector<std::vector<FeatureId>> keys;
  std::vector<std::vector<float>> gradients;
};

// False (and `joined` untouched) when every batch has its own table.
bool JoinBatchesOfOneTable(absl::Span<const GradientBatch> batches,
                           absl::Span<EmbeddingTable* const> tables,
                           JoinedPush* joined) {
  absl::flat_hash_map<EmbeddingTable*, size_t> first;
  for (size_t b = 0; b < batches.size(); ++b) first.try_emplace(tables[b], b);
  if (first.size() == batches.size()) return false;
  absl::flat_hash_map<EmbeddingTable*, size_t> slot;
  for (size_t b = 0; b < batches.size(); ++b) {
    auto [it, added] = slot.try_emplace(tables[b], joined->tables.size());
    if (added) {
      joined->tables.push_back(tables[b]);
      joined->batches.push_back(batches[b]);
      joined->keys.emplace_back();
      joined->gradients.emplace_back();
    }
    const size_t j = it->second;
    joined->keys[j].insert(joined->keys[j].end(), batches[b].keys.begin(),
                           batches[b].keys.end());
    joined->gradients[j].insert(joined->gradients[j].end(),
                                batches[b].gradients.begin(),
                                batches[b].gradients.end());
    joined->batches[j].global_step =
        std::max(joined->batches[j].global_step, batches[b].global_step);
  }
  for (size_t j = 0; j < joined->batches.size(); ++j) {
    joined->batches[j].keys = joined->keys[j];
    joined->batches[j].gradients = joined->gradients[j];
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> RocksDbEmbeddingStore::ApplyGradients(
    absl::Span<const GradientBatch> batches, const PushId& id) {
  if (id.client_id.size() > kMaxClientIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("push client_id holds ", id.client_id.size(),
                     " bytes, over the limit of ", kMaxClientIdBytes));
  }
  if (options_.durability == Durability::kPeriodic) {
    return ApplyGradientsConcurrently(batches, id);
  }
  if (options_.durability == Durability::kGroup) {
    STRATA_ASSIGN_OR_RETURN(std::optional<bool> logged,
                            ApplyGradientsToLog(batches, id));
    if (logged.has_value()) return *logged;
  }
  uint64_t sequence = 0;
  STRATA_ASSIGN_OR_RETURN(const bool duplicate,
                          ApplyGradientsSerially(batches, id, &sequence));
  if (options_.durability != Durability::kSync) return duplicate;
  // After releasing the exclusive lock, so that concurrent pushes share one
  // fsync: it makes every write before it durable, ours included. The
  // shared lock keeps Restore from closing the database meanwhile. A
  // duplicate waits too: the push it repeats may still be waiting for its
  // fsync.
  absl::ReaderMutexLock lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  STRATA_RETURN_IF_ERROR(SyncLogAndPublishLocked(duplicate ? 0 : sequence));
  return duplicate;
}

bool RocksDbEmbeddingStore::WasPushApplied(const PushId& id) {
  return !id.client_id.empty() && id.sequence > 0 &&
         deduplicator_.Applied(id.client_id, id.sequence);
}

absl::Status RocksDbEmbeddingStore::CheckFsyncHealthy() {
  if (!fsync_failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&write_error_mu_);
  return absl::UnavailableError(absl::StrCat(
      "writes are refused until the shard restarts: an fsync of its log "
      "failed (",
      last_write_error_, ")"));
}

absl::Status RocksDbEmbeddingStore::SyncLogAndPublishLocked(uint64_t through) {
  absl::MutexLock sync_lock(&sync_mu_);
  STRATA_RETURN_IF_ERROR(CheckFsyncHealthy());
  // Read first: what was appended before the fsync began was also written
  // to the log before it (no writer holds commit_mu_ exclusively now).
  const uint64_t covered = change_log_.appended_sequence();
  const uint64_t wanted = through == 0 ? covered : through;
  if (change_log_.latest_sequence() >= wanted) return absl::OkStatus();
  rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) {
    absl::Status error = absl::InternalError(
        absl::StrCat("fsync of the log failed: ", s.ToString()));
    fsync_failed_.store(true);
    NoteWriteError(error);
    return error;
  }
  change_log_.Publish(covered);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EmbeddingTable*>>
RocksDbEmbeddingStore::FindPushTablesLocked(
    absl::Span<const GradientBatch> batches) {
  std::vector<EmbeddingTable*> tables;
  absl::ReaderMutexLock lock(&tables_mu_);
  for (const GradientBatch& batch : batches) {
    EmbeddingTable* table = FindTable(batch.table);
    if (table == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("unknown table '", batch.table, "'"));
    }
    STRATA_RETURN_IF_ERROR(FirstInvalidGradient(batch, table->dim()));
    tables.push_back(table);
  }
  // Tables are never dropped while commit_mu_ is held, so the pointers stay
  // valid without tables_mu_.
  return tables;
}

absl::Status RocksDbEmbeddingStore::CheckWritableLocked() {
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  if (read_only_) {
    return ReadOnlyError();
  }
  auto last_error = [this] {
    absl::MutexLock lock(&write_error_mu_);
    return last_write_error_;
  };
  STRATA_RETURN_IF_ERROR(CheckFsyncHealthy());
  const uint64_t unwritten = unwritten_rows_.load(std::memory_order_relaxed);
  if (unwritten > options_.max_unwritten_rows) {
    return absl::UnavailableError(
        absl::StrCat("pushes are refused while flushes fail: ", unwritten,
                     " rows wait to be written, over the bound of ",
                     options_.max_unwritten_rows, " (", last_error(), ")"));
  }
  if (push_log_ != nullptr &&
      push_log_->bytes() > options_.max_push_log_bytes) {
    return absl::UnavailableError(absl::StrCat(
        "pushes are refused while flushes fail: the push log holds ",
        push_log_->bytes(),
        " bytes not yet written to the store, over the "
        "bound of ",
        options_.max_push_log_bytes, " (", last_error(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RocksDbEmbeddingStore::ApplyGradientsConcurrently(
    absl::Span<const GradientBatch> batches, const PushId& id) {
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckWritableLocked());
  STRATA_ASSIGN_OR_RETURN(const std::vector<EmbeddingTable*> tables,
                          FindPushTablesLocked(batches));
  const bool deduplicated = !id.client_id.empty() && id.sequence > 0;
  if (deduplicated && !deduplicator_.Claim(id.client_id, id.sequence)) {
    return true;
  }
  // A stored row that could not be read: its key was skipped.
  absl::Status load_error = absl::OkStatus();
  // Pushes apply concurrently (stripe locks only); the record of each is
  // filled afterwards by reading its rows again under the log's lock, so
  // that of two pushes changing a row, the later record carries the later
  // value. Only the keys updated (admitted) go into the record, and none
  // while nothing has read the log (ChangeRecord::followed).
  // Without admission every key is updated, and no visitor is needed.
  std::vector<std::vector<FeatureId>> updated(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    std::vector<FeatureId>& keys = updated[b];
    EmbeddingTable::RowVisitor collect;
    // Admission may refuse a key, and a budgeted table skips a key whose
    // stored row could not be read: the record holds the updated keys.
    if (CountsSightings(tables[b]->config().admission) ||
        tables[b]->has_memory_budget()) {
      keys.reserve(batches[b].keys.size());
      collect = [&keys](FeatureId key, const float*, const float*) {
        keys.push_back(key);
      };
    } else {
      keys.assign(batches[b].keys.begin(), batches[b].keys.end());
    }
    tables[b]->ApplyGradients(batches[b].keys, batches[b].gradients.data(),
                              /*track_dirty=*/true, collect,
                              batches[b].global_step,
                              ColdRowLoaderLocked(*tables[b], &load_error));
  }
  change_log_.Append([&](ChangeRecord& change) {
    if (!change.followed) {
      change.rows_left_out = true;
      return;
    }
    change.rows.resize(batches.size());
    for (size_t b = 0; b < batches.size(); ++b) {
      ChangedRows& rows = change.rows[b];
      rows.table = std::string(batches[b].table);
      rows.dim = tables[b]->dim();
      rows.keys = std::move(updated[b]);
      rows.values.resize(rows.keys.size() * rows.dim);
      tables[b]->Lookup(rows.keys, rows.values.data());
    }
  });
  STRATA_RETURN_IF_ERROR(load_error);
  return false;
}

absl::StatusOr<std::optional<bool>> RocksDbEmbeddingStore::ApplyGradientsToLog(
    absl::Span<const GradientBatch> batches, const PushId& id) {
  if (needs_recovery_.load()) {
    absl::MutexLock lock(&commit_mu_);
    STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  }
  // Shared: a flush writes its cut to RocksDB while pushes go on (it cuts
  // with the lock held exclusively, between two pushes).
  absl::ReaderMutexLock commit_lock(&commit_mu_);
  if (!LogsPushesLocked()) return std::nullopt;
  absl::MutexLock order_lock(&push_order_mu_);
  uint64_t sequence = 0;
  return StageAndCommitLocked(batches, id, /*logged=*/true, &sequence);
}

absl::StatusOr<bool> RocksDbEmbeddingStore::ApplyGradientsSerially(
    absl::Span<const GradientBatch> batches, const PushId& id,
    uint64_t* sequence) {
  // Exclusive: pushes reach the disk, memory and the log in one order, and
  // a push's rows are staged, written and committed with nothing between.
  absl::MutexLock commit_lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(RecoverWritesLocked());
  absl::MutexLock order_lock(&push_order_mu_);
  return StageAndCommitLocked(batches, id, /*logged=*/false, sequence);
}

absl::StatusOr<bool> RocksDbEmbeddingStore::StageAndCommitLocked(
    absl::Span<const GradientBatch> batches, const PushId& id, bool logged,
    uint64_t* sequence) {
  STRATA_RETURN_IF_ERROR(CheckWritableLocked());
  STRATA_ASSIGN_OR_RETURN(std::vector<EmbeddingTable*> tables,
                          FindPushTablesLocked(batches));
  const bool deduplicated = !id.client_id.empty() && id.sequence > 0;
  if (deduplicated && deduplicator_.Applied(id.client_id, id.sequence)) {
    return true;
  }
  JoinedPush joined;
  if (JoinBatchesOfOneTable(batches, tables, &joined)) {
    batches = joined.batches;
    tables = joined.tables;
  }
  // The new rows are computed aside and written first: a push whose write
  // fails reaches neither memory, nor the change stream, nor the window.
  // The buffers are kept from push to push (a push of 8192 rows of
  // 64 + 64 floats stages 4 MiB; fresh, its pages faulted in every time).
  std::vector<EmbeddingTable::StagedRows>& staged = staged_scratch_;
  if (staged.size() < batches.size()) staged.resize(batches.size());
  for (EmbeddingTable::StagedRows& rows : staged) {
    // What an unusually large push left is not kept.
    constexpr size_t kMaxKeptFloats = size_t{16} << 20;  // 64 MiB
    if (rows.rows.capacity() > kMaxKeptFloats) rows = {};
  }
  for (size_t b = 0; b < batches.size(); ++b) {
    absl::Status load_error = absl::OkStatus();
    absl::Status s = tables[b]->StageGradients(
        batches[b].keys, batches[b].gradients.data(), batches[b].global_step,
        ColdRowLoaderLocked(*tables[b], &load_error), &staged[b]);
    if (!s.ok()) return load_error.ok() ? s : load_error;
  }
  // kGroup: the rows go to the push log, and to RocksDB with the next
  // flush, once however often they were pushed meanwhile.
  const auto staged_now = absl::MakeConstSpan(staged.data(), batches.size());
  STRATA_RETURN_IF_ERROR(logged ? AppendToPushLogLocked(tables, staged_now, id)
                                : WriteStagedLocked(tables, staged_now, id));
  for (size_t b = 0; b < batches.size(); ++b) {
    tables[b]->CommitStaged(staged[b], /*track_dirty=*/logged);
  }
  if (deduplicated && logged) {
    deduplicator_.Claim(id.client_id, id.sequence);  // the flush writes it
  } else if (deduplicated) {
    deduplicator_.ClaimPersisted(id.client_id, id.sequence);
  }
  if (push_log_ != nullptr && id.replication.sequence > 0) {
    logged_replication_ = id.replication;
  }
  *sequence = change_log_.Append([&](ChangeRecord& change) {
    if (!change.followed) {
      // No follower has read the log: the record's rows would be a copy of
      // every updated value that nothing reads.
      change.rows_left_out = true;
      return;
    }
    change.rows.resize(batches.size());
    for (size_t b = 0; b < batches.size(); ++b) {
      ChangedRows& rows = change.rows[b];
      const uint32_t dim = tables[b]->dim();
      const size_t width = dim + tables[b]->state_dim();
      rows.table = std::string(batches[b].table);
      rows.dim = dim;
      rows.keys = staged_now[b].keys;
      rows.values.resize(rows.keys.size() * dim);
      for (size_t k = 0; k < rows.keys.size(); ++k) {
        std::memcpy(rows.values.data() + k * dim,
                    staged_now[b].rows.data() + k * width, dim * sizeof(float));
      }
    }
  });
  return false;
}

absl::Status RocksDbEmbeddingStore::WriteStagedLocked(
    absl::Span<EmbeddingTable* const> tables,
    absl::Span<const EmbeddingTable::StagedRows> staged, const PushId& id) {
  rocksdb::WriteBatch write;
  for (size_t b = 0; b < tables.size(); ++b) {
    const TableId table_id = tables[b]->id();
    const uint32_t dim = tables[b]->dim(), state_dim = tables[b]->state_dim();
    const std::vector<FeatureId>& keys = staged[b].keys;
    // In key order: the vector memtable sorts its entries when it flushes,
    // and runs already in order spare that sort most of its cache misses.
    std::vector<uint32_t> order(keys.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&keys](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
    for (uint32_t i : order) {
      const float* row = staged[b].rows.data() + size_t{i} * (dim + state_dim);
      const std::string row_key = RowKey(table_id, keys[i]);
      write.Put(handles_[1], row_key, FloatSlice(row, dim));
      if (state_dim > 0) {
        write.Put(handles_[2], row_key, FloatSlice(row + dim, state_dim));
      }
    }
  }
  if (!id.client_id.empty() && id.sequence > 0) {
    write.Put(handles_[0], absl::StrCat(kClientPrefix, id.client_id),
              deduplicator_.SerializeWindowWith(id.client_id, id.sequence));
  }
  if (id.replication.sequence > 0) {
    write.Put(handles_[0], kReplicationPositionKey,
              EncodeReplicationPosition(id.replication));
  }
  return WriteLocked(write, /*sync=*/false);
}

absl::Status RocksDbEmbeddingStore::AppendToPushLogLocked(
    absl::Span<EmbeddingTable* const> tables,
    absl::Span<const EmbeddingTable::StagedRows> staged, const PushId& id) {
  PushLogRecord record;
  if (!id.client_id.empty() && id.sequence > 0) {
    record.client_id = id.client_id;
    record.client_sequence = id.sequence;
  }
  record.replication = id.replication;
  for (size_t b = 0; b < tables.size(); ++b) {
    PushLogRows rows;
    rows.table = tables[b]->id();
    rows.dim = tables[b]->dim();
    rows.state_dim = tables[b]->state_dim();
    rows.keys = staged[b].keys;
    rows.rows = staged[b].rows.data();
    record.tables.push_back(rows);
  }
  absl::Status appended = push_log_->Append(record);
  if (!appended.ok()) {
    NoteWriteError(appended);
    return appended;
  }
  NoteWriteWorked();
  return absl::OkStatus();
}

std::string EncodeReplicationPosition(const ReplicationPosition& position) {
  std::string out(2 * sizeof(uint64_t), '\0');
  std::memcpy(out.data(), &position.term, sizeof(uint64_t));
  std::memcpy(out.data() + sizeof(uint64_t), &position.sequence,
              sizeof(uint64_t));
  return out;
}

absl::StatusOr<ReplicationPosition>
RocksDbEmbeddingStore::ReadReplicationPosition() {
  absl::ReaderMutexLock lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  // kGroup: RocksDB has it as of the last flush, the push log since.
  if (push_log_ != nullptr) {
    absl::MutexLock order_lock(&push_order_mu_);
    return logged_replication_;
  }
  return ReadReplicationPositionLocked();
}

absl::StatusOr<ReplicationPosition>
RocksDbEmbeddingStore::ReadReplicationPositionLocked() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), handles_[0],
                               kReplicationPositionKey, &value);
  if (s.IsNotFound()) return ReplicationPosition{};
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot read the replication position: ", s.ToString()));
  }
  if (value.size() != 2 * sizeof(uint64_t)) {
    return absl::DataLossError(
        absl::StrCat("the stored replication position has ", value.size(),
                     " bytes, not 16"));
  }
  ReplicationPosition position;
  std::memcpy(&position.term, value.data(), sizeof(uint64_t));
  std::memcpy(&position.sequence, value.data() + sizeof(uint64_t),
              sizeof(uint64_t));
  return position;
}

absl::Status RocksDbEmbeddingStore::RecordReplicationPosition(
    const ReplicationPosition& position) {
  absl::MutexLock lock(&commit_mu_);
  STRATA_RETURN_IF_ERROR(CheckOpenLocked());
  rocksdb::WriteBatch write;
  write.Put(handles_[0], kReplicationPositionKey,
            EncodeReplicationPosition(position));
  STRATA_RETURN_IF_ERROR(
      WriteLocked(write, options_.durability == Durability::kSync));
  if (push_log_ != nullptr) {
    absl::MutexLock order_lock(&push_order_mu_);
    logged_replication_ = position;
  }
  return absl::OkStatus();
}

}  // namespace embedding_internal
}  // namespace strata
