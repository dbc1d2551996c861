#ifndef STRATA_EMBEDDING_INITIALIZER_H_
#define STRATA_EMBEDDING_INITIALIZER_H_

#include <cstdint>

#include "embedding/table_config.h"

namespace strata {

// Computes a row's initial value as a pure function of (seed, key): a pull
// retried or replayed on any shard sees the same row. Thread-safe.
class Initializer {
 public:
  Initializer(const InitializerConfig& config, uint64_t seed);

  // Writes `dim` floats to `out`.
  void Fill(FeatureId key, uint32_t dim, float* out) const;

 private:
  InitializerConfig config_;
  uint64_t seed_;
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_INITIALIZER_H_
