#ifndef STRATA_EMBEDDING_EMBEDDING_TABLE_H_
#define STRATA_EMBEDDING_EMBEDDING_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "embedding/initializer.h"
#include "embedding/optimizer.h"
#include "embedding/table_config.h"

namespace strata {

// The in-memory rows of one table: the value (dim floats) and optimizer
// state (state_dim floats) of every row that has been written, in a fixed
// number of stripes, each a hash map under its own lock. Rows never written
// are not stored: a lookup computes their initial value on the fly.
//
// Thread-safe; operations on different stripes run in parallel, and no
// global lock is taken on the data path.
class EmbeddingTable {
 public:
  // Called for each updated row with the row's value and state, while the
  // stripe is still locked (so that callers see rows in update order).
  using RowVisitor = std::function<void(FeatureId key, const float* value,
                                        const float* state)>;

  EmbeddingTable(const EmbeddingTableConfig& config, TableId id);
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  const EmbeddingTableConfig& config() const { return config_; }
  TableId id() const { return id_; }
  uint32_t dim() const { return config_.dim; }
  uint32_t state_dim() const { return optimizer_->state_dim(); }

  // Writes keys.size() * dim() floats to `out`, row-major in key order.
  void Lookup(absl::Span<const FeatureId> keys, float* out) const;

  // Applies gradients (keys.size() * dim() floats) row by row; a key that
  // appears twice is updated twice. When `track_dirty`, updated keys are
  // remembered until TakeDirtyRows. `on_updated` may be null.
  void ApplyGradients(absl::Span<const FeatureId> keys, const float* gradients,
                      bool track_dirty, const RowVisitor& on_updated);

  // Inserts or replaces a row (recovery and restore).
  void PutRow(FeatureId key, const float* value, const float* state);

  // Visits and forgets the rows updated since the last call.
  void TakeDirtyRows(const RowVisitor& visitor);

  // Visits every stored row, one stripe locked at a time.
  void ForEachRow(const RowVisitor& visitor) const;

  uint64_t num_rows() const;
  // Bytes held by rows and indexes.
  uint64_t memory_bytes() const;

 private:
  struct Stripe {
    mutable absl::Mutex mu;
    // Key -> offset of the row in `rows` (in units of row_width_).
    absl::flat_hash_map<FeatureId, uint32_t> index ABSL_GUARDED_BY(mu);
    std::vector<float> rows ABSL_GUARDED_BY(mu);
    absl::flat_hash_set<FeatureId> dirty ABSL_GUARDED_BY(mu);
  };

  static constexpr int kStripeBits = 6;
  static constexpr size_t kNumStripes = size_t{1} << kStripeBits;

  static size_t StripeOf(FeatureId key);
  // Returns the row of `key` in `stripe`, creating it if missing.
  float* FindOrCreateRow(Stripe& stripe, FeatureId key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Orders the positions of `keys` by stripe; `starts` gets kNumStripes + 1
  // offsets into `order`.
  static void GroupByStripe(absl::Span<const FeatureId> keys,
                            std::vector<uint32_t>& order,
                            std::vector<uint32_t>& starts);

  const EmbeddingTableConfig config_;
  const TableId id_;
  const Initializer initializer_;
  const std::unique_ptr<Optimizer> optimizer_;
  const uint32_t row_width_;  // dim + state_dim floats.
  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_EMBEDDING_TABLE_H_
