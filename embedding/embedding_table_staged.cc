// EmbeddingTable, staged updates: a push's new rows computed aside, written
// to disk by the caller, and only then put in memory, so that a push whose
// write fails leaves nothing behind. See embedding/embedding_table.h.

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/float_bounds.h"
#include "embedding/embedding_table.h"
#include "embedding/internal/feature_admission.h"

namespace strata {
namespace {

// The first non-finite float of `values`, or -1.
int64_t FirstNonFinite(const float* values, size_t count) {
  if (AllMagnitudesAtMost(absl::MakeConstSpan(values, count),
                          std::numeric_limits<float>::max())) {
    return -1;
  }
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

absl::Status EmbeddingTable::StageGradients(absl::Span<const FeatureId> keys,
                                            const float* gradients,
                                            uint64_t global_step,
                                            const RowLoader& loader,
                                            StagedRows* staged) {
  const uint32_t dim = config_.dim;
  staged->keys.clear();
  staged->rows.clear();
  staged->created.clear();
  staged->global_step = global_step;
  staged->keys.reserve(keys.size());
  staged->rows.reserve(keys.size() * size_t{row_width_});
  // Key -> its position in `staged`, for keys that appear more than once.
  absl::flat_hash_map<FeatureId, uint32_t> position;
  position.reserve(keys.size());
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, order, starts);
  for (size_t s = 0; s < kNumStripes; ++s) {
    if (starts[s] == starts[s + 1]) continue;
    const Stripe& stripe = stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    const auto key_at = [&](size_t k) { return keys[order[k]]; };
    for (uint32_t j = starts[s]; j < starts[s + 1]; ++j) {
      // The rows are where a large table's staging waits: fetched ahead.
      PrefetchForUpdateAhead(stripe, j, starts[s], starts[s + 1], key_at);
      const uint32_t i = order[j];
      const FeatureId key = keys[i];
      auto [it, first] =
          position.try_emplace(key, static_cast<uint32_t>(staged->keys.size()));
      if (first) {
        staged->rows.resize(staged->rows.size() + row_width_);
        float* row = staged->rows.data() + staged->rows.size() - row_width_;
        bool created = false;
        if (const uint32_t slot = stripe.index.Find(key);
            slot != embedding_internal::RowIndex::kAbsent) {
          std::memcpy(row, stripe.rows.data() + size_t{slot} * row_width_,
                      row_width_ * sizeof(float));
        } else {
          optimizer_->InitState(row + dim);
          const LoadResult load =
              loader ? loader(key, row, row + dim) : LoadResult::kAbsent;
          if (load == LoadResult::kFailed) {
            return absl::InternalError(absl::StrCat(
                "table '", config_.name, "': cannot read stored row ", key));
          }
          if (load != LoadResult::kFound) {
            if (admission_ != nullptr && !admission_->Admit(key)) {
              rejected_gradients_.fetch_add(1, std::memory_order_relaxed);
              staged->rows.resize(staged->rows.size() - row_width_);
              position.erase(it);
              continue;
            }
            initializer_.Fill(key, dim, row);
            created = true;
          }
        }
        staged->keys.push_back(key);
        staged->created.push_back(created);
      }
      float* row = staged->rows.data() + size_t{it->second} * row_width_;
      optimizer_->Apply(gradients + size_t{i} * dim, row, row + dim);
      if (const int64_t bad = FirstNonFinite(row, row_width_); bad >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", config_.name, "': the update of key ", key,
            " would make its ", bad < dim ? "value" : "optimizer state",
            " non-finite (", row[bad],
            "); nothing of the push was applied (lower the learning rate or "
            "clip the gradients)"));
      }
    }
  }
  return absl::OkStatus();
}

void EmbeddingTable::CommitStaged(const StagedRows& staged, bool track_dirty) {
  NoteStep(staged.global_step);
  const RowStamp stamp{staged.global_step,
                       evicts_ ? absl::ToUnixMicros(clock_->Now()) : 0};
  const size_t count = staged.keys.size();
  const auto key_at = [&](size_t k) { return staged.keys[k]; };
  size_t begin = 0;
  while (begin < count) {
    // Keys come grouped by stripe: one lock per group.
    const size_t stripe_index = StripeOf(staged.keys[begin]);
    size_t end = begin + 1;
    while (end < count && StripeOf(staged.keys[end]) == stripe_index) ++end;
    Stripe& stripe = stripes_[stripe_index];
    absl::MutexLock lock(&stripe.mu);
    for (size_t k = begin; k < end; ++k) {
      PrefetchForUpdateAhead(stripe, k, begin, end, key_at);
      const FeatureId key = staged.keys[k];
      float* row;
      if (const uint32_t slot = stripe.index.Find(key);
          slot != embedding_internal::RowIndex::kAbsent) {
        row = stripe.rows.data() + size_t{slot} * row_width_;
      } else {
        row = NewSlot(stripe, key);
        // A row not new is on disk only: loaded by the staging, or moved
        // out of memory since by this commit's room for another row.
        if (staged.created[k]) {
          admitted_keys_.fetch_add(1, std::memory_order_relaxed);
        } else {
          cold_rows_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      std::memcpy(row, staged.rows.data() + k * row_width_,
                  row_width_ * sizeof(float));
      const size_t slot = (row - stripe.rows.data()) / row_width_;
      if (evicts_) stripe.stamps[slot] = stamp;
      // On disk already (or dirty, which keeps it): the row may leave
      // memory when room is needed.
      if (budgeted_) stripe.referenced[slot] = kReferenced;
      if (track_dirty) MarkDirtyLocked(stripe, key);
    }
    begin = end;
  }
}

}  // namespace strata
