#include "embedding/initializer.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "common/hash.h"
#include "embedding/table_config.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr uint32_t kDim = 16;
constexpr float kCanary = -12345.0f;

InitializerConfig Uniform(float min, float max) {
  InitializerConfig config;
  config.type = InitializerType::kUniform;
  config.min = min;
  config.max = max;
  return config;
}

InitializerConfig TruncatedNormal(float mean, float stddev) {
  InitializerConfig config;
  config.type = InitializerType::kTruncatedNormal;
  config.mean = mean;
  config.stddev = stddev;
  return config;
}

// Fills `dim` floats and checks nothing is written past them.
std::vector<float> Row(const Initializer& initializer, FeatureId key,
                       uint32_t dim = kDim) {
  std::vector<float> row(dim + 1, kCanary);
  initializer.Fill(key, dim, row.data());
  EXPECT_EQ(row[dim], kCanary) << "wrote past the row of key " << key;
  row.pop_back();
  return row;
}

const FeatureId kSomeKeys[] = {0,
                               1,
                               2,
                               42,
                               1ull << 32,
                               0x8000000000000000ull,
                               std::numeric_limits<FeatureId>::max()};

TEST(InitializerTest, SameSeedAndKeyGiveIdenticalRowsAcrossInstances) {
  for (const InitializerConfig& config :
       {Uniform(-0.05f, 0.05f), TruncatedNormal(0.0f, 0.05f)}) {
    const Initializer a(config, /*seed=*/7);
    const Initializer b(config, /*seed=*/7);
    for (FeatureId key : kSomeKeys) {
      const std::vector<float> row = Row(a, key);
      EXPECT_EQ(row, Row(b, key)) << key;
      EXPECT_EQ(row, Row(a, key)) << key;  // And again on the same instance.
    }
  }
}

TEST(InitializerTest, RowsArePinnedAcrossReleases) {
  // Rows never written are computed on the fly, so a change of these values
  // changes every such row of every running cluster. Computed once,
  // independently, in Python from the SplitMix64 definition.
  const Initializer uniform(Uniform(-0.05f, 0.05f), /*seed=*/42);
  EXPECT_EQ(Row(uniform, 7, 4),
            (std::vector<float>{0x1.9609e8p-7f, -0x1.500740p-5f, 0x1.e52348p-7f,
                                -0x1.1210bcp-5f}));
  const Initializer uniform_seed0(Uniform(-0.05f, 0.05f), /*seed=*/0);
  EXPECT_EQ(Row(uniform_seed0, 0, 2),
            (std::vector<float>{0x1.7feb66p-5f, -0x1.2e37a0p-6f}));
  // Box-Muller goes through libm's log and cos: allow their last bit.
  const Initializer normal(TruncatedNormal(0.0f, 0.05f), /*seed=*/42);
  const std::vector<float> row = Row(normal, 7, 4);
  const float expected[] = {0x1.502d94p-5f, 0x1.8290c8p-6f, -0x1.5af104p-6f,
                            -0x1.54f06cp-7f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(row[i], expected[i], 1e-8f) << i;
}

// The truncated normal one draw at a time, from the generator's definition
// (uniform k of a row: the top 24 bits of Mix64(row seed + constant * k)).
std::vector<float> OneDrawAtATime(uint64_t seed, FeatureId key, float mean,
                                  float stddev, uint32_t dim, int* redraws) {
  const uint64_t row_seed = Mix64(seed ^ Mix64(key));
  uint64_t counter = 0;
  auto uniform = [&] {
    const uint64_t bits = Mix64(row_seed + 0x632BE59BD9B4E019ull * ++counter);
    return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
  };
  std::vector<float> row;
  while (row.size() < dim) {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-12) u1 = 1e-12;
    const double z =
        std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    if (std::fabs(z) <= 2.0) {
      row.push_back(static_cast<float>(mean + stddev * z));
    } else {
      ++*redraws;
    }
  }
  return row;
}

TEST(InitializerTest, TruncatedNormalDrawsMatchOneAtATime) {
  // Fill draws several normals at once (with vector log and cos where glibc
  // has them): the values must be those of one draw at a time, the last
  // bit aside, redraws included.
  const Initializer initializer(TruncatedNormal(0.25f, 0.5f), /*seed=*/11);
  int redraws = 0;
  for (FeatureId key = 0; key < 3000; ++key) {
    const std::vector<float> want =
        OneDrawAtATime(11, key, 0.25f, 0.5f, 37, &redraws);
    const std::vector<float> row = Row(initializer, key, 37);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(row[i], want[i], 1e-6f) << "key " << key << ", value " << i;
    }
  }
  // About 4.6% of the draws fall past two stddevs: 5,000 or so here.
  EXPECT_GT(redraws, 3000);
}

TEST(InitializerTest, DifferentKeysAndSeedsGiveDifferentRows) {
  for (const InitializerConfig& config :
       {Uniform(-0.05f, 0.05f), TruncatedNormal(0.0f, 0.05f)}) {
    const Initializer initializer(config, /*seed=*/1);
    std::set<std::vector<float>> rows;
    for (FeatureId key = 0; key < 2000; ++key) {
      rows.insert(Row(initializer, key));
    }
    EXPECT_EQ(rows.size(), 2000u);
    const Initializer other_seed(config, /*seed=*/2);
    for (FeatureId key : kSomeKeys) {
      EXPECT_NE(Row(initializer, key), Row(other_seed, key)) << key;
    }
    // The coordinates of a row are not copies of each other either.
    const std::vector<float> row = Row(initializer, 3);
    EXPECT_EQ(std::set<float>(row.begin(), row.end()).size(), row.size());
  }
}

TEST(InitializerTest, UniformStaysInRangeWithMeanNearCenter) {
  const float min = -0.25f, max = 0.75f;
  const Initializer initializer(Uniform(min, max), /*seed=*/99);
  constexpr int kKeys = 8192;
  double sum = 0, sum_sq = 0;
  float lowest = max, highest = min;
  for (FeatureId key = 0; key < kKeys; ++key) {
    for (float v : Row(initializer, key * 7919)) {
      ASSERT_GE(v, min) << key;
      ASSERT_LT(v, max) << key;
      lowest = std::min(lowest, v);
      highest = std::max(highest, v);
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  const double n = double{kKeys} * kDim;
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  // Standard error of the mean: sqrt(1/12 / n) ~ 0.0008.
  EXPECT_NEAR(mean, 0.25, 0.005);
  EXPECT_NEAR(variance, 1.0 / 12, 0.005);
  EXPECT_LT(lowest, min + 0.001f);
  EXPECT_GT(highest, max - 0.001f);
}

TEST(InitializerTest, UniformWithEqualBoundsIsConstant) {
  const Initializer initializer(Uniform(0.5f, 0.5f), /*seed=*/3);
  for (FeatureId key : kSomeKeys) {
    EXPECT_EQ(Row(initializer, key), std::vector<float>(kDim, 0.5f));
  }
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStddevs) {
  const float mean = 0.5f, stddev = 0.1f;
  const Initializer initializer(TruncatedNormal(mean, stddev), /*seed=*/5);
  const float low = static_cast<float>(mean - 2.0 * stddev);
  const float high = static_cast<float>(mean + 2.0 * stddev);
  constexpr int kKeys = 4096;
  double sum = 0, sum_sq = 0;
  int beyond_one_stddev = 0;
  for (FeatureId key = 0; key < kKeys; ++key) {
    for (float v : Row(initializer, key)) {
      ASSERT_GE(v, low) << key;
      ASSERT_LE(v, high) << key;
      if (std::fabs(v - mean) > stddev) ++beyond_one_stddev;
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  const double n = double{kKeys} * kDim;
  const double sample_mean = sum / n;
  const double sample_stddev =
      std::sqrt(sum_sq / n - sample_mean * sample_mean);
  EXPECT_NEAR(sample_mean, mean, 0.002);
  // A normal cut at +-2 stddevs has stddev 0.8796 * stddev.
  EXPECT_NEAR(sample_stddev / stddev, 0.8796, 0.015);
  // P(1 < |z| <= 2 | |z| <= 2) = 0.2718 / 0.9545 = 0.2848.
  EXPECT_NEAR(beyond_one_stddev / n, 0.2848, 0.005);
}

TEST(InitializerTest, TruncatedNormalWithZeroStddevIsTheMean) {
  const Initializer initializer(TruncatedNormal(-1.5f, 0.0f), /*seed=*/5);
  for (FeatureId key : kSomeKeys) {
    EXPECT_EQ(Row(initializer, key), std::vector<float>(kDim, -1.5f));
  }
}

TEST(InitializerTest, ZerosAndConstantFillEveryCoordinate) {
  InitializerConfig zeros;
  zeros.type = InitializerType::kZeros;
  zeros.value = 3.0f;  // Ignored by kZeros.
  InitializerConfig constant;
  constant.type = InitializerType::kConstant;
  constant.value = -0.125f;
  const Initializer zero_initializer(zeros, /*seed=*/11);
  const Initializer constant_initializer(constant, /*seed=*/11);
  for (FeatureId key : kSomeKeys) {
    const std::vector<float> zero_row = Row(zero_initializer, key);
    EXPECT_EQ(zero_row, std::vector<float>(kDim, 0.0f));
    for (float v : zero_row) EXPECT_FALSE(std::signbit(v));
    EXPECT_EQ(Row(constant_initializer, key),
              std::vector<float>(kDim, -0.125f));
  }
  // Dimensions other than 16, including the largest.
  EXPECT_EQ(Row(constant_initializer, 5, 1), std::vector<float>(1, -0.125f));
  EXPECT_EQ(Row(constant_initializer, 5, kMaxTableDim),
            std::vector<float>(kMaxTableDim, -0.125f));
}

TEST(InitializerTest, PrefixOfALongerRowIsTheShorterRow) {
  // The i-th value depends on (seed, key, i) only: a table's rows do not
  // depend on how many coordinates are filled at once.
  const Initializer initializer(Uniform(-1.0f, 1.0f), /*seed=*/8);
  const std::vector<float> long_row = Row(initializer, 77, 64);
  const std::vector<float> short_row = Row(initializer, 77, 16);
  EXPECT_EQ(std::vector<float>(long_row.begin(), long_row.begin() + 16),
            short_row);
}

}  // namespace
}  // namespace strata
