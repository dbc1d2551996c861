#ifndef STRATA_EMBEDDING_EMBEDDING_TABLE_H_
#define STRATA_EMBEDDING_EMBEDDING_TABLE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/default_init_allocator.h"
#include "common/huge_page_allocator.h"
#include "embedding/initializer.h"
#include "embedding/internal/row_index.h"
#include "embedding/optimizer.h"
#include "embedding/table_config.h"

namespace strata {
namespace embedding_internal {
class FeatureAdmission;
}  // namespace embedding_internal

// The in-memory rows of one table: the value (dim floats) and optimizer
// state (state_dim floats) of every row that has been written, in a fixed
// number of stripes, each a hash map under its own lock. Rows never written
// are not stored: a lookup computes their initial value on the fly.
//
// A push of a key without a row creates it only when the table's admission
// policy (config.admission) admits the key; otherwise the key's gradient is
// dropped and counted. When the table evicts (config.eviction), each row
// also keeps the global step and time of its last update, and
// EvictionCandidates/EvictRows delete the rows the policy selects.
//
// Thread-safe; operations on different stripes run in parallel, and no
// global lock is taken on the data path.
class EmbeddingTable {
 public:
  // Called for each updated row with the row's value and state, while the
  // stripe is still locked (so that callers see rows in update order).
  using RowVisitor = std::function<void(FeatureId key, const float* value,
                                        const float* state)>;

  // `clock` (not owned) stamps updated rows for eviction. `shard_budget`:
  // a table without a memory budget of its own gets a share of its shard's
  // (SetMemoryBudget) and must keep what a budget needs.
  EmbeddingTable(const EmbeddingTableConfig& config, TableId id,
                 Clock* clock = Clock::Real(), bool shard_budget = false);
  ~EmbeddingTable();
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  const EmbeddingTableConfig& config() const { return config_; }
  TableId id() const { return id_; }
  uint32_t dim() const { return config_.dim; }
  uint32_t state_dim() const { return optimizer_->state_dim(); }

  // Loads the stored row of a key not in memory (a table with a memory
  // budget keeps the others on disk): writes dim() floats to `value` and
  // state_dim() to `state` (pre-filled with the optimizer's initial state,
  // kept when none is stored). kFailed (the disk could not be read) skips
  // the key, so that a stored row is never replaced by a new one; the
  // loader reports the error to its caller. Called with the key's stripe
  // locked.
  enum class LoadResult { kFound, kAbsent, kFailed };
  using RowLoader =
      std::function<LoadResult(FeatureId key, float* value, float* state)>;

  // Writes keys.size() * dim() floats to `out`, row-major in key order.
  void Lookup(absl::Span<const FeatureId> keys, float* out) const;
  // The same, but a key without a row in memory is not filled: its position
  // is appended to `misses` (for a table with a memory budget, whose caller
  // reads those rows from disk).
  void Lookup(absl::Span<const FeatureId> keys, float* out,
              std::vector<uint32_t>* misses) const;
  // The value of a row never written: the initializer's.
  void InitialValue(FeatureId key, float* out) const;

  // Applies gradients (keys.size() * dim() floats) row by row; a key that
  // appears twice is updated twice. A key without a row that admission does
  // not admit is skipped (not visited). When `track_dirty`, updated keys are
  // remembered until TakeDirtyRows. `on_updated` may be null.
  // `global_step` is the trainer's step of the gradients, 0 when unknown.
  // With a memory budget, a key not in memory is first given to `loader`
  // (its stored row, if any, comes back into memory), and rows beyond the
  // budget then leave memory, least recently pushed first, never one not
  // yet written (TakeDirtyRows) to disk.
  // The updated rows stay pinned (in memory) until the call ends. (A caller
  // that must write rows to disk before they are visible stages them
  // instead: StageGradients.)
  void ApplyGradients(absl::Span<const FeatureId> keys, const float* gradients,
                      bool track_dirty, const RowVisitor& on_updated,
                      uint64_t global_step = 0,
                      const RowLoader& loader = nullptr);

  // A push's new rows, computed without changing the table, for a caller
  // that must have them on disk before anyone can read them (sync and group
  // durability): StageGradients, write the rows, then CommitStaged. Between
  // the two no other update of the table may run.
  struct StagedRows {
    // Each updated key once, grouped by stripe.
    std::vector<FeatureId> keys;
    // Per key, dim() value floats then state_dim() state floats (not
    // zeroed as they grow: staging writes each row whole).
    std::vector<float, DefaultInitAllocator<float>> rows;
    // Per key: the row is new (admitted now).
    std::vector<uint8_t> created;
    uint64_t global_step = 0;
  };
  // Computes into `staged` the rows that ApplyGradients would leave (a key
  // that appears twice is updated twice; a key admission refuses is
  // skipped). Nothing of the table changes except admission's count of
  // sightings. INVALID_ARGUMENT naming the key when an updated value or
  // state is not finite; INTERNAL when `loader` cannot read a stored row.
  absl::Status StageGradients(absl::Span<const FeatureId> keys,
                              const float* gradients, uint64_t global_step,
                              const RowLoader& loader, StagedRows* staged);
  // Puts the staged rows in memory. Without `track_dirty` their write is
  // in, so with a memory budget they may leave memory again at once; with
  // it they are remembered until TakeDirtyRows, and stay in memory until
  // then (group durability: the rows went to the push log, and reach the
  // table's files with the next flush).
  void CommitStaged(const StagedRows& staged, bool track_dirty = false);

  // Inserts or replaces a row (recovery and restore). For eviction it counts
  // as updated now, at no known step. With a memory budget, a new row past
  // the budget stays on disk only (it is counted, not kept).
  void PutRow(FeatureId key, const float* value, const float* state);

  // Visits and forgets the rows updated since the last call.
  void TakeDirtyRows(const RowVisitor& visitor);
  // How many rows TakeDirtyRows would visit now.
  size_t num_dirty_rows() const;
  // Remembers the rows of `keys` (those in memory) as updated again: their
  // write failed.
  void MarkDirty(absl::Span<const FeatureId> keys);

  // Visits every stored row, one stripe locked at a time.
  void ForEachRow(const RowVisitor& visitor) const;

  // Bucket moves (embedding_table_moves.cc). The keys in memory of stripe
  // `stripe` (< num_stripes()) that `select` takes, sorted.
  std::vector<FeatureId> SelectKeysOfStripe(
      size_t stripe, const std::function<bool(FeatureId)>& select) const;
  // Copies the row of `key` in memory (dim() floats to `value`, state_dim()
  // to `state`); false when it is not in memory.
  bool ReadRow(FeatureId key, float* value, float* state) const;
  // Deletes the rows of `keys` that are in memory, without counting them as
  // evicted; returns how many. (The store writes their deletion.)
  uint64_t RemoveRows(absl::Span<const FeatureId> keys);
  // A table with a memory budget: `count` rows kept on disk only were
  // deleted there.
  void ForgetColdRows(uint64_t count);

  // Eviction runs stripe by stripe, in two steps, so that pulls never wait
  // for a scan: EvictionCandidates scans stripe `stripe` (< kNumStripes)
  // under its shared lock, and EvictRows takes the exclusive lock only to
  // delete the candidates that still qualify, calling `on_evicted` for
  // each. A deleted row is forgotten by TakeDirtyRows too. Both do nothing
  // when the table does not evict.
  std::vector<FeatureId> EvictionCandidates(size_t stripe) const;
  void EvictRows(size_t stripe, absl::Span<const FeatureId> candidates,
                 const std::function<void(FeatureId key)>& on_evicted);
  static constexpr size_t num_stripes() { return kNumStripes; }

  // Every row, in memory or (with a memory budget) on disk only.
  uint64_t num_rows() const;
  uint64_t rows_in_memory() const;
  bool has_memory_budget() const { return cap() > 0; }
  // Sets the memory budget of a table made with shard_budget and without a
  // budget of its own (others ignore it); rows past a smaller budget leave
  // memory at the next ShrinkToBudget or push.
  void SetMemoryBudget(uint64_t bytes);
  // Moves rows past the memory budget out of memory, for when rows not yet
  // written to disk kept a push from doing it: after a periodic flush.
  void ShrinkToBudget();
  // Bytes held by rows, indexes and the admission sketch.
  uint64_t memory_bytes() const;
  // Keys given a row by a push (admitted), and gradients of keys dropped
  // because admission refused them, since the table was loaded.
  uint64_t admitted_keys() const {
    return admitted_keys_.load(std::memory_order_relaxed);
  }
  uint64_t rejected_gradients() const {
    return rejected_gradients_.load(std::memory_order_relaxed);
  }
  uint64_t evicted_rows() const {
    return evicted_rows_.load(std::memory_order_relaxed);
  }
  // The highest global step of a push so far; 0 when none carried one.
  uint64_t latest_step() const {
    return latest_step_.load(std::memory_order_relaxed);
  }

 private:
  // When a row was last updated; step 0: unknown.
  struct RowStamp {
    uint64_t step = 0;
    int64_t micros = 0;
  };

  struct Stripe {
    mutable absl::Mutex mu;
    // Key -> offset of the row in `rows` (in units of row_width_).
    embedding_internal::RowIndex index ABSL_GUARDED_BY(mu);
    std::vector<float, HugePageAllocator<float>> rows ABSL_GUARDED_BY(mu);
    // The keys whose index entries were marked dirty (updated, not yet
    // written to disk), in the order marked, for TakeDirtyRows. Only the
    // marks count: a key deleted (and so unmarked) since stays here, and
    // may come again if its row was made and marked anew.
    std::vector<FeatureId> dirty_keys ABSL_GUARDED_BY(mu);
    // Per slot, only when the table evicts: the key (so that a deleted
    // slot can be filled by the last one) and the last update.
    std::vector<FeatureId> keys ABSL_GUARDED_BY(mu);
    std::vector<RowStamp> stamps ABSL_GUARDED_BY(mu);
    // Per slot, only with a memory budget: pushed since the clock hand last
    // passed (the hand picks which rows leave memory: CLOCK, an
    // approximation of least recently used).
    std::vector<uint8_t> referenced ABSL_GUARDED_BY(mu);
    uint32_t clock_hand ABSL_GUARDED_BY(mu) = 0;
  };

  // Entries a stripe's dirty_keys may hold past twice its marks.
  static constexpr size_t kDirtyListSlack = 1024;
  static constexpr int kStripeBits = 6;
  static constexpr size_t kNumStripes = size_t{1} << kStripeBits;

  static size_t StripeOf(FeatureId key);
  // Whether the row in `slot` is to be evicted at `now_micros`.
  bool Evictable(const Stripe& stripe, uint32_t slot, int64_t now_micros) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu);
  // Rebuilds a stripe whose slots do not record their keys without the
  // rows of `keys`; returns how many left.
  uint64_t CompactWithout(Stripe& stripe, absl::Span<const FeatureId> keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Marks the row of `key` (present) as not yet written to disk.
  void MarkDirtyLocked(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Deletes the row of `key` (present): the last slot moves into its place.
  void DeleteRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  void NoteStep(uint64_t global_step);
  // Rows per stripe a memory budget of `bytes` allows; 0: no budget.
  uint32_t StripeRowCap(uint64_t bytes) const;
  uint32_t cap() const {
    return stripe_row_cap_.load(std::memory_order_relaxed);
  }
  // Grows the stripe's containers for one more row, up to `rows` (the
  // budget's rows per stripe).
  void ReserveWithinBudget(Stripe& stripe, uint32_t rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Appends a slot for `key` (not in the stripe) and returns its row,
  // uninitialized.
  float* NewSlot(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // The stored row of `key` through `loader`, brought into memory; nullptr
  // when it has none, or (`*failed`) when it could not be read.
  float* LoadRow(Stripe& stripe, FeatureId key, const RowLoader& loader,
                 bool* failed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Unpins the rows of `keys` at `positions` in one stripe.
  void UnpinLocked(Stripe& stripe, absl::Span<const FeatureId> keys,
                   absl::Span<const uint32_t> positions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Moves rows out of memory until the stripe holds at most `rows`, passing
  // over pinned rows and rows not yet written to disk.
  void ShrinkTo(Stripe& stripe, uint32_t rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Stripe::referenced values. A row is pinned while the push that updates
  // it runs (its write may not be on disk yet).
  static constexpr uint8_t kUnreferenced = 0;
  static constexpr uint8_t kReferenced = 1;
  static constexpr uint8_t kPinned = 2;
  // Returns the row of `key` in `stripe`, creating it if missing.
  float* FindOrCreateRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Like FindOrCreateRow, but a missing row is created only when admission
  // admits the key; nullptr otherwise.
  float* FindOrAdmitRow(Stripe& stripe, FeatureId key, const RowLoader& loader)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Lookups and pushes prefetch the index probe of the key this far ahead
  // and the row of the key kRowPrefetchAhead ahead: on a large table both
  // are cache misses.
  static constexpr uint32_t kIndexPrefetchAhead = 16;
  static constexpr uint32_t kRowPrefetchAhead = 8;
  // Returns the row of `key` (null when it has none) and hints the CPU to
  // fetch it into its caches: the value to be read, or value and state to
  // be updated (`for_update`). A hint only: it never faults, even when a
  // row created meanwhile has moved the rows.
  const float* FindAndPrefetchRow(const Stripe& stripe, FeatureId key,
                                  bool for_update) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu);
  // For position j of [begin, end) in a stripe's keys (`key_at(k)` the key
  // at position k), about to be updated or written out: fetches the index
  // probe kIndexPrefetchAhead keys ahead and the row (value and state)
  // kRowPrefetchAhead keys ahead, and at j == begin the ones before those.
  template <typename KeyAt>
  void PrefetchForUpdateAhead(const Stripe& stripe, size_t j, size_t begin,
                              size_t end, const KeyAt& key_at) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu);
  // Orders the positions of `keys` by stripe; `starts` gets kNumStripes + 1
  // offsets into `order`.
  static void GroupByStripe(absl::Span<const FeatureId> keys,
                            std::vector<uint32_t>& order,
                            std::vector<uint32_t>& starts);

  const EmbeddingTableConfig config_;
  const TableId id_;
  Clock* const clock_;
  const bool evicts_;
  const Initializer initializer_;
  const std::unique_ptr<Optimizer> optimizer_;
  const uint32_t row_width_;  // dim + state_dim floats.
  // The table has (or may get) a memory budget.
  const bool budgeted_;
  // Rows per stripe in memory; 0: no budget.
  std::atomic<uint32_t> stripe_row_cap_;
  // Slots remember their keys (eviction and the memory budget need them).
  const bool tracks_slots_;
  std::unique_ptr<Stripe[]> stripes_;
  // Rows on disk only (memory budget).
  std::atomic<int64_t> cold_rows_{0};
  // Null when every key is admitted at once.
  const std::unique_ptr<embedding_internal::FeatureAdmission> admission_;
  std::atomic<uint64_t> admitted_keys_{0};
  std::atomic<uint64_t> rejected_gradients_{0};
  std::atomic<uint64_t> evicted_rows_{0};
  // The first and highest global steps seen since the table was loaded. A
  // row updated at no known step (loaded from disk, or pushed without a
  // step) counts as updated at first_step_ for eviction by steps.
  std::atomic<uint64_t> first_step_{0};
  std::atomic<uint64_t> latest_step_{0};
};

template <typename KeyAt>
void EmbeddingTable::PrefetchForUpdateAhead(const Stripe& stripe, size_t j,
                                            size_t begin, size_t end,
                                            const KeyAt& key_at) const {
  if (j == begin) {
    for (size_t k = begin; k < std::min(end, begin + kIndexPrefetchAhead);
         ++k) {
      stripe.index.Prefetch(key_at(k));
    }
    for (size_t k = begin; k < std::min(end, begin + kRowPrefetchAhead); ++k) {
      FindAndPrefetchRow(stripe, key_at(k), /*for_update=*/true);
    }
  }
  if (j + kIndexPrefetchAhead < end) {
    stripe.index.Prefetch(key_at(j + kIndexPrefetchAhead));
  }
  if (j + kRowPrefetchAhead < end) {
    FindAndPrefetchRow(stripe, key_at(j + kRowPrefetchAhead),
                       /*for_update=*/true);
  }
}

}  // namespace strata

#endif  // STRATA_EMBEDDING_EMBEDDING_TABLE_H_
