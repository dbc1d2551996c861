#ifndef STRATA_EMBEDDING_INTERNAL_FEATURE_ADMISSION_H_
#define STRATA_EMBEDDING_INTERNAL_FEATURE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "embedding/table_config.h"

namespace strata {
namespace embedding_internal {

// Counts sightings of keys in bounded memory: `depth` rows of `width`
// counters, each key hashed to one counter per row; a key's count is the
// smallest of its counters. Collisions only ever add to a counter, so the
// estimate is never below the true count: a key can be admitted early
// (when it shares counters with frequent keys), never late. Thread-safe
// (relaxed atomics: concurrent increments are never lost).
class CountMinSketch {
 public:
  CountMinSketch(uint32_t width, uint32_t depth, uint64_t seed);
  CountMinSketch(const CountMinSketch&) = delete;
  CountMinSketch& operator=(const CountMinSketch&) = delete;

  // Adds one sighting of `key`; returns its estimated count, this one
  // included.
  uint32_t Increment(FeatureId key);
  uint64_t memory_bytes() const {
    return uint64_t{width_} * depth_ * sizeof(uint32_t);
  }

 private:
  size_t Cell(uint32_t row, FeatureId key) const;

  const uint32_t width_;
  const uint32_t depth_;
  const uint64_t seed_;
  std::unique_ptr<std::atomic<uint32_t>[]> counters_;
};

// The admission policy of one table (AdmissionConfig): decides at each
// sighting of a key without a row whether it gets one. Deterministic for a
// given sequence of sightings. Thread-safe.
class FeatureAdmission {
 public:
  FeatureAdmission(const AdmissionConfig& config, uint64_t seed);

  // Records a sighting of `key`, which has no row; true admits it.
  bool Admit(FeatureId key);
  uint64_t memory_bytes() const { return sketch_.memory_bytes(); }

 private:
  const AdmissionConfig config_;
  const uint64_t seed_;
  CountMinSketch sketch_;
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_FEATURE_ADMISSION_H_
