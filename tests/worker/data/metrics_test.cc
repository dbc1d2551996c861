#include "worker/data/metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/random.h"

namespace strata {
namespace {

using Floats = std::vector<float>;

TEST(MetricsTest, AucOfPerfectReversedAndConstantScores) {
  const Floats labels = {0, 0, 1, 1};
  EXPECT_EQ(ExactAuc(labels, Floats{0.1f, 0.2f, 0.3f, 0.4f}), 1.0);
  EXPECT_EQ(ExactAuc(labels, Floats{0.4f, 0.3f, 0.2f, 0.1f}), 0.0);
  EXPECT_EQ(ExactAuc(labels, Floats{0.5f, 0.5f, 0.5f, 0.5f}), 0.5);
}

TEST(MetricsTest, TiedPairsCountOneHalf) {
  // Pairs (positive, negative): (0.8, 0.8) tie -> 1/2, (0.8, 0.1) -> 1,
  // (0.3, 0.8) -> 0, (0.3, 0.1) -> 1: 2.5 of 4.
  EXPECT_EQ(ExactAuc(Floats{1, 0, 1, 0}, Floats{0.8f, 0.8f, 0.3f, 0.1f}),
            0.625);
  EXPECT_EQ(
      ExactAuc(Floats{1, 0, 1, 0}, std::vector<double>{0.8, 0.8, 0.3, 0.1}),
      0.625);
}

TEST(MetricsTest, AucIsNanWhenUndefined) {
  EXPECT_TRUE(std::isnan(ExactAuc(Floats{1, 1}, Floats{0.1f, 0.2f})));
  EXPECT_TRUE(std::isnan(ExactAuc(Floats{0, 0}, Floats{0.1f, 0.2f})));
  EXPECT_TRUE(std::isnan(ExactAuc(Floats{}, Floats{})));
  EXPECT_TRUE(std::isnan(ExactAuc(Floats{0, 1}, Floats{0.1f})));
  EXPECT_TRUE(std::isnan(ExactAuc(Floats{0, 1}, Floats{0.1f, NAN})));
}

TEST(MetricsTest, AucEqualsPairCountingOnRandomScoresWithTies) {
  SplitMix64Rng rng(7);
  Floats labels, scores;
  for (int i = 0; i < 600; ++i) {
    labels.push_back(rng.Uniform() < 0.3 ? 1.0f : 0.0f);
    scores.push_back(static_cast<float>(rng.Next() % 20));  // many ties
  }
  double wins = 0, pairs = 0;
  for (size_t p = 0; p < labels.size(); ++p) {
    if (labels[p] != 1) continue;
    for (size_t n = 0; n < labels.size(); ++n) {
      if (labels[n] != 0) continue;
      ++pairs;
      wins += scores[p] > scores[n] ? 1 : scores[p] == scores[n] ? 0.5 : 0;
    }
  }
  EXPECT_DOUBLE_EQ(ExactAuc(labels, scores), wins / pairs);
}

TEST(MetricsTest, LogLossIsMeanCrossEntropyWithClipping) {
  EXPECT_DOUBLE_EQ(LogLoss(Floats{1, 0}, Floats{0.5f, 0.5f}), std::log(2.0));
  EXPECT_DOUBLE_EQ(LogLoss(Floats{1, 0, 0}, std::vector<double>{0.9, 0.2, 0.4}),
                   -(std::log(0.9) + std::log(0.8) + std::log(0.6)) / 3);
  // A certain mistake costs -log(1e-15), not infinity.
  EXPECT_NEAR(LogLoss(Floats{1}, std::vector<double>{0.0}), 34.538776, 1e-5);
  EXPECT_TRUE(std::isnan(LogLoss(Floats{}, Floats{})));
  EXPECT_TRUE(std::isnan(LogLoss(Floats{1}, Floats{0.5f, 0.5f})));
}

}  // namespace
}  // namespace strata
