#ifndef STRATA_SERVING_INTERNAL_ROW_CACHE_H_
#define STRATA_SERVING_INTERNAL_ROW_CACHE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "embedding/internal/row_index.h"
#include "embedding/table_config.h"
#include "serving/serving_store.h"

namespace strata {
namespace serving_internal {

struct RowId {
  TableId table = 0;
  FeatureId key = 0;

  friend bool operator==(const RowId& a, const RowId& b) {
    return a.table == b.table && a.key == b.key;
  }
  template <typename H>
  friend H AbslHashValue(H h, const RowId& id) {
    return H::combine(std::move(h), id.table, id.key);
  }
};

// One row a writer changes: its new values, or an empty span for a delete.
struct CachedWrite {
  RowId id;
  absl::Span<const float> values;
};

// A bounded cache of rows in front of the serving store's RocksDB, split in
// stripes that each evict by CLOCK (second chance): a hit only sets its
// slot's bit, where an LRU list would relink three nodes, each a likely
// cache miss, on every hit. A stripe finds a row through a RowIndex per
// table (the training shard's: a key's entry is almost always in one or two
// cache lines that can be fetched ahead), and GetMany fetches the index
// lines, the slot and the row of the keys a few places ahead of the one it
// copies, so that a lookup of cold rows waits on memory once per few keys
// rather than three times per key. Thread-safe.
//
// A reader that misses reads RocksDB and then offers the row to the cache;
// a write may have changed the row in between, so offers carry a ticket and
// are dropped when a write touched the row's stripe since (or is touching
// it now). Writers call BeginWrite before writing RocksDB (it evicts the
// rows) and EndWrite after (it puts back the new values of rows that were
// cached). So the cache never holds a value older than RocksDB's, and a
// reader never sees a row go back to an older value.
class RowCache {
 public:
  // `capacity` rows; 0 disables the cache.
  explicit RowCache(uint64_t capacity);
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Copies the cached rows of `keys` of `table`, each `dim` floats, in
  // order, into `out`; appends the index of each row not cached to `misses`
  // and its ticket for Offer to `tickets`, in no particular order. Takes
  // each stripe's lock once, not once per row.
  void GetMany(TableId table, absl::Span<const FeatureId> keys, size_t dim,
               absl::Span<float> out, std::vector<size_t>& misses,
               std::vector<uint64_t>& tickets);
  // Caches `values` read from RocksDB after GetMany gave `ticket`, unless a
  // write touched the row's stripe since.
  void Offer(const RowId& id, uint64_t ticket, absl::Span<const float> values);

  // Sets cached[i] for each of `writes` whose row is cached now. Every
  // cached row is in RocksDB too, so a writer that keeps other writers out
  // need not read these to know they exist.
  void Contains(absl::Span<const CachedWrite> writes,
                std::vector<bool>& cached);

  // Brackets a RocksDB write of `writes`; EndWrite gets the same span.
  // `was_cached` is scratch space for the pair.
  void BeginWrite(absl::Span<const CachedWrite> writes,
                  std::vector<bool>& was_cached);
  void EndWrite(absl::Span<const CachedWrite> writes,
                const std::vector<bool>& was_cached);
  // Brackets a write that may change any row: EndClear empties the cache.
  void BeginClear();
  void EndClear();

  uint64_t size();
  // Sums the stripes' counts, taking each stripe's lock in turn.
  RowCacheStats Stats();

 private:
  static constexpr size_t kStripes = 64;
  struct Slot {
    RowId id;
    // Set by a hit, cleared as the clock hand passes: a row not read since
    // the hand last passed is the one evicted.
    bool referenced = false;
    std::vector<float> values;
  };
  struct Stripe {
    absl::Mutex mu;
    // Grows to reserved_per_stripe_ slots, and beyond with slots taken
    // from the shared budget; shrinks only when cleared.
    // Those past reserved_per_stripe_ came from the shared budget.
    std::vector<Slot> slots ABSL_GUARDED_BY(mu);
    // Slots emptied by writes and clears, reused first.
    std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
    // Per table, its cached keys' slots; a table with no row cached here
    // has no entry.
    absl::flat_hash_map<TableId, embedding_internal::RowIndex> index
        ABSL_GUARDED_BY(mu);
    size_t hand ABSL_GUARDED_BY(mu) = 0;
    // Bumped by every write; a ticket is the generation it was taken at.
    uint64_t generation ABSL_GUARDED_BY(mu) = 1;
    int writers ABSL_GUARDED_BY(mu) = 0;
    uint64_t hits ABSL_GUARDED_BY(mu) = 0;
    uint64_t misses ABSL_GUARDED_BY(mu) = 0;
    uint64_t evictions ABSL_GUARDED_BY(mu) = 0;
  };

  static size_t StripeOf(const RowId& id);
  // Looks up the keys of `table` at `positions` (indices into `keys`) in
  // one stripe, as GetMany does.
  void GetFromStripe(Stripe& stripe, TableId table,
                     absl::Span<const FeatureId> keys,
                     absl::Span<const size_t> positions, size_t dim,
                     absl::Span<float> out, std::vector<size_t>& misses,
                     std::vector<uint64_t>& tickets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // The slot of `id`, or RowIndex::kAbsent.
  static uint32_t FindSlot(const Stripe& stripe, const RowId& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Removes `id` (which must be cached) from the index.
  static void Unindex(Stripe& stripe, const RowId& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  void Put(Stripe& stripe, const RowId& id, absl::Span<const float> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // A slot for a new row: a free one, a new one (within the stripe's
  // reserve or from the shared budget), or the clock's victim (removed from
  // the index); kNoSlot when the stripe has none and the budget is spent.
  uint32_t TakeSlot(Stripe& stripe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Takes one slot from the shared budget, if any is left.
  bool TakeSharedSlot();
  // Drops the row of `id` if cached; true if it was.
  static bool Remove(Stripe& stripe, const RowId& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);
  // Calls fn(stripe, indices of `writes` in it) for each stripe touched.
  template <typename Fn>
  void ForEachStripe(absl::Span<const CachedWrite> writes, Fn fn);

  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  const uint64_t capacity_;
  // Slots each stripe may always make: one (none in a cache smaller than
  // the stripes), so that every stripe can cache a row. The rest of the
  // capacity is shared, first come first served, so that stripes that hash
  // more rows than others hold them all: with even shares, a cache of a
  // million rows in front of a million-row table held 996,514 of them, and
  // lookups of the rest kept evicting each other.
  const uint64_t reserved_per_stripe_;
  std::atomic<uint64_t> shared_slots_left_;
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace serving_internal
}  // namespace strata

#endif  // STRATA_SERVING_INTERNAL_ROW_CACHE_H_
