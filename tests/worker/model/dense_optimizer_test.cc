#include "worker/model/dense_optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

TEST(DenseOptimizerTest, AdamFollowsTheReferenceOverSteps) {
  DenseOptimizerConfig config;
  config.learning_rate = 0.01f;
  auto opt = DenseOptimizer::Create(config, 2);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> params = {1.0f, -2.0f};
  double m[2] = {0, 0}, v[2] = {0, 0}, ref[2] = {1.0, -2.0};
  for (int t = 1; t <= 50; ++t) {
    const std::vector<float> grad = {0.3f * t, -0.05f};
    ASSERT_THAT((*opt)->Apply(grad, absl::MakeSpan(params)), IsOk());
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * grad[i];
      v[i] = 0.999 * v[i] + 0.001 * grad[i] * grad[i];
      const double mh = m[i] / (1 - std::pow(0.9, t));
      const double vh = v[i] / (1 - std::pow(0.999, t));
      ref[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  EXPECT_NEAR(params[0], ref[0], 1e-4);
  EXPECT_NEAR(params[1], ref[1], 1e-4);
  EXPECT_EQ((*opt)->steps(), 50);
}

TEST(DenseOptimizerTest, AdagradFollowsTheReference) {
  DenseOptimizerConfig config;
  config.kind = DenseOptimizerConfig::Kind::kAdagrad;
  config.learning_rate = 0.1f;
  auto opt = DenseOptimizer::Create(config, 1);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> params = {0.5f};
  double acc = 0.1, ref = 0.5;
  for (int t = 0; t < 20; ++t) {
    const float g = 0.2f - 0.03f * t;
    ASSERT_THAT((*opt)->Apply({g}, absl::MakeSpan(params)), IsOk());
    acc += g * g;
    ref -= 0.1 * g / std::sqrt(acc);
  }
  EXPECT_NEAR(params[0], ref, 1e-5);
}

TEST(DenseOptimizerTest, SchedulesWarmUpLinearlyThenHoldOrDecay) {
  DenseOptimizerConfig config;
  config.learning_rate = 0.01f;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 1), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 1000), 0.01f);
  config.warmup_steps = 100;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 1), 0.0001f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 50), 0.005f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 100), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 10000), 0.01f);
  config.schedule = DenseOptimizerConfig::Schedule::kInverseSqrt;
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 50), 0.005f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 100), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 400), 0.005f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 10000), 0.001f);
  config.warmup_steps = 0;  // decays from the first step
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 1), 0.01f);
  EXPECT_FLOAT_EQ(ScheduledLearningRate(config, 4), 0.005f);
  EXPECT_THAT(ParseLearningRateSchedule("rsqrt").status(), IsOk());
  EXPECT_THAT(ParseLearningRateSchedule("cosine").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.warmup_steps = -1;
  EXPECT_THAT(DenseOptimizer::Create(config, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DenseOptimizerTest, AdagradStepsAtTheScheduledRate) {
  DenseOptimizerConfig config;
  config.kind = DenseOptimizerConfig::Kind::kAdagrad;
  config.learning_rate = 0.1f;
  config.warmup_steps = 10;
  auto opt = DenseOptimizer::Create(config, 1);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> params = {0.5f};
  double acc = 0.1, ref = 0.5;
  for (int t = 1; t <= 20; ++t) {
    const float g = 0.2f - 0.01f * t;
    ASSERT_THAT((*opt)->Apply({g}, absl::MakeSpan(params)), IsOk());
    acc += g * g;
    ref -= 0.1 * std::min(1.0, t / 10.0) * g / std::sqrt(acc);
  }
  EXPECT_NEAR(params[0], ref, 1e-5);
}

TEST(DenseOptimizerTest, StateRoundTripsAndRejectsAnotherShape) {
  DenseOptimizerConfig config;
  auto a = DenseOptimizer::Create(config, 3);
  auto b = DenseOptimizer::Create(config, 3);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  std::vector<float> pa = {1, 2, 3}, pb = {1, 2, 3};
  ASSERT_THAT((*a)->Apply({0.1f, 0.2f, 0.3f}, absl::MakeSpan(pa)), IsOk());
  ASSERT_THAT((*b)->RestoreState((*a)->SerializeState()), IsOk());
  pb = pa;
  ASSERT_THAT((*a)->Apply({0.4f, -0.2f, 0.1f}, absl::MakeSpan(pa)), IsOk());
  ASSERT_THAT((*b)->Apply({0.4f, -0.2f, 0.1f}, absl::MakeSpan(pb)), IsOk());
  EXPECT_EQ(pa, pb);
  EXPECT_EQ((*b)->steps(), 2);

  auto other = DenseOptimizer::Create(config, 4);
  ASSERT_THAT(other.status(), IsOk());
  EXPECT_THAT((*other)->RestoreState((*a)->SerializeState()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::string torn = (*a)->SerializeState();
  torn.pop_back();
  EXPECT_THAT((*b)->RestoreState(torn), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT((*b)->RestoreState("junk"),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DenseOptimizerTest, BadConfigAndSizesAreRejected) {
  DenseOptimizerConfig config;
  config.learning_rate = 0;
  EXPECT_THAT(DenseOptimizer::Create(config, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto opt = DenseOptimizer::Create(DenseOptimizerConfig(), 2);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> params(3);
  EXPECT_THAT((*opt)->Apply({1, 2}, absl::MakeSpan(params)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDenseOptimizerKind("sgd").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata
