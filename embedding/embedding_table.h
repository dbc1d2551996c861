#ifndef STRATA_EMBEDDING_EMBEDDING_TABLE_H_
#define STRATA_EMBEDDING_EMBEDDING_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "embedding/initializer.h"
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

  // `clock` (not owned) stamps updated rows for eviction.
  EmbeddingTable(const EmbeddingTableConfig& config, TableId id,
                 Clock* clock = Clock::Real());
  ~EmbeddingTable();
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  const EmbeddingTableConfig& config() const { return config_; }
  TableId id() const { return id_; }
  uint32_t dim() const { return config_.dim; }
  uint32_t state_dim() const { return optimizer_->state_dim(); }

  // Writes keys.size() * dim() floats to `out`, row-major in key order.
  void Lookup(absl::Span<const FeatureId> keys, float* out) const;

  // Applies gradients (keys.size() * dim() floats) row by row; a key that
  // appears twice is updated twice. A key without a row that admission does
  // not admit is skipped (not visited). When `track_dirty`, updated keys are
  // remembered until TakeDirtyRows. `on_updated` may be null.
  // `global_step` is the trainer's step of the gradients, 0 when unknown.
  void ApplyGradients(absl::Span<const FeatureId> keys, const float* gradients,
                      bool track_dirty, const RowVisitor& on_updated,
                      uint64_t global_step = 0);

  // Inserts or replaces a row (recovery and restore). For eviction it counts
  // as updated now, at no known step.
  void PutRow(FeatureId key, const float* value, const float* state);

  // Visits and forgets the rows updated since the last call.
  void TakeDirtyRows(const RowVisitor& visitor);

  // Visits every stored row, one stripe locked at a time.
  void ForEachRow(const RowVisitor& visitor) const;

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

  uint64_t num_rows() const;
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
    absl::flat_hash_map<FeatureId, uint32_t> index ABSL_GUARDED_BY(mu);
    std::vector<float> rows ABSL_GUARDED_BY(mu);
    absl::flat_hash_set<FeatureId> dirty ABSL_GUARDED_BY(mu);
    // Per slot, only when the table evicts: the key (so that a deleted
    // slot can be filled by the last one) and the last update.
    std::vector<FeatureId> keys ABSL_GUARDED_BY(mu);
    std::vector<RowStamp> stamps ABSL_GUARDED_BY(mu);
  };

  static constexpr int kStripeBits = 6;
  static constexpr size_t kNumStripes = size_t{1} << kStripeBits;

  static size_t StripeOf(FeatureId key);
  // Whether the row in `slot` is to be evicted at `now_micros`.
  bool Evictable(const Stripe& stripe, uint32_t slot, int64_t now_micros) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu);
  // Deletes the row of `key` (present): the last slot moves into its place.
  void DeleteRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  void NoteStep(uint64_t global_step);
  // Returns the row of `key` in `stripe`, creating it if missing.
  float* FindOrCreateRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Like FindOrCreateRow, but a missing row is created only when admission
  // admits the key; nullptr otherwise.
  float* FindOrAdmitRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
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
  std::unique_ptr<Stripe[]> stripes_;
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

}  // namespace strata

#endif  // STRATA_EMBEDDING_EMBEDDING_TABLE_H_
