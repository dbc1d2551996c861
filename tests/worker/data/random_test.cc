#include "worker/data/random.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(SplitMix64RngTest, MatchesSplitMix64AndIsInOpenUnitInterval) {
  SplitMix64Rng rng(0);
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFull);  // Vigna's reference
  EXPECT_GT(SplitMix64Rng::ToUnit(0), 0.0);
  EXPECT_LT(SplitMix64Rng::ToUnit(~uint64_t{0}), 1.0);
}

TEST(ZipfSamplerTest, FrequenciesFollowThePowerLaw) {
  for (double s : {1.05, 1.2, 2.0}) {
    const int n = 20;
    ZipfSampler zipf(n, s);
    SplitMix64Rng rng(3);
    std::vector<double> counts(n + 1, 0);
    const int samples = 400000;
    for (int i = 0; i < samples; ++i) {
      const uint64_t k = zipf.Sample(rng);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, static_cast<uint64_t>(n));
      ++counts[k];
    }
    double norm = 0;
    for (int k = 1; k <= n; ++k) norm += std::pow(k, -s);
    for (int k = 1; k <= n; ++k) {
      const double expected = std::pow(k, -s) / norm;
      // 5 standard deviations of a binomial proportion.
      const double tolerance =
          5 * std::sqrt(expected * (1 - expected) / samples);
      EXPECT_NEAR(counts[k] / samples, expected, tolerance)
          << "s=" << s << " k=" << k;
    }
  }
}

TEST(ZipfSamplerTest, HandlesOneValueAndHugeVocabularies) {
  SplitMix64Rng rng(5);
  ZipfSampler one(1, 1.1);
  ZipfSampler huge(4000000000ull, 1.1);
  for (int i = 0; i < 10000; ++i) {
    EXPECT_EQ(one.Sample(rng), 1u);
    const uint64_t k = huge.Sample(rng);
    EXPECT_GE(k, 1u);
    EXPECT_LE(k, 4000000000ull);
  }
}

}  // namespace
}  // namespace strata
