#include "embedding/internal/feature_admission.h"

#include <algorithm>
#include <limits>

#include "common/hash.h"

namespace strata {
namespace embedding_internal {
namespace {

// Distinct per-row salts, so that two keys colliding in one row rarely
// collide in another.
constexpr uint64_t kRowSalt = 0xA24BAED4963EE407ull;
constexpr uint64_t kDrawSalt = 0x9FB21C651E98DF25ull;

}  // namespace

CountMinSketch::CountMinSketch(uint32_t width, uint32_t depth, uint64_t seed)
    : width_(width == 0 ? kDefaultSketchWidth : width),
      depth_(depth == 0 ? kDefaultSketchDepth : depth),
      seed_(seed),
      counters_(new std::atomic<uint32_t>[size_t{width_} * depth_]) {
  for (size_t i = 0; i < size_t{width_} * depth_; ++i) {
    counters_[i].store(0, std::memory_order_relaxed);
  }
}

size_t CountMinSketch::Cell(uint32_t row, FeatureId key) const {
  const uint64_t h = Mix64(key ^ Mix64(seed_ + kRowSalt * (row + 1)));
  return size_t{row} * width_ + static_cast<size_t>(h % width_);
}

uint32_t CountMinSketch::Increment(FeatureId key) {
  uint32_t estimate = std::numeric_limits<uint32_t>::max();
  for (uint32_t row = 0; row < depth_; ++row) {
    std::atomic<uint32_t>& counter = counters_[Cell(row, key)];
    uint32_t seen = counter.load(std::memory_order_relaxed);
    // Saturates instead of wrapping, so that a count never drops.
    while (seen != std::numeric_limits<uint32_t>::max() &&
           !counter.compare_exchange_weak(seen, seen + 1,
                                          std::memory_order_relaxed)) {
    }
    const uint32_t now =
        seen == std::numeric_limits<uint32_t>::max() ? seen : seen + 1;
    estimate = std::min(estimate, now);
  }
  return estimate;
}

FeatureAdmission::FeatureAdmission(const AdmissionConfig& config, uint64_t seed)
    : config_(config),
      seed_(seed),
      sketch_(config.sketch_width, config.sketch_depth, seed) {}

bool FeatureAdmission::Admit(FeatureId key) {
  const uint32_t count = sketch_.Increment(key);
  if (count < config_.min_count) return false;
  if (config_.probability >= 1.0f) return true;
  // A fixed draw per (seed, key, count): the same sightings admit the same
  // keys on every run. The top 24 bits make a uniform float in [0, 1).
  const uint64_t h = Mix64(Mix64(key ^ (seed_ + kDrawSalt)) + count);
  const float draw = static_cast<float>(h >> 40) * (1.0f / (1 << 24));
  return draw < config_.probability;
}

}  // namespace embedding_internal
}  // namespace strata
