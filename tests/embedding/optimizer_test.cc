#include "embedding/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "embedding/table_config.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr uint32_t kDim = 16;
constexpr int kSteps = 300;
// Written past the end of every buffer to catch out-of-range writes.
constexpr float kCanary = -12345.0f;

// The published update rules in float64, on the state layout of
// OptimizerStateDim: Adagrad [a]; Adam [m, v, t]; FTRL [z, n].
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(const OptimizerConfig& config, uint32_t dim)
      : c_(config), dim_(dim) {}

  std::vector<double> InitState() const {
    std::vector<double> state(OptimizerStateDim(c_.type, dim_), 0.0);
    if (c_.type == OptimizerType::kAdagrad) {
      for (double& a : state) a = c_.initial_accumulator;
    }
    return state;
  }

  void Apply(const std::vector<float>& gradient, std::vector<double>& w,
             std::vector<double>& state) const {
    const double lr = c_.learning_rate, eps = c_.epsilon;
    for (uint32_t i = 0; i < dim_; ++i) {
      const double g = gradient[i];
      switch (c_.type) {
        case OptimizerType::kSgd:
          w[i] -= lr * g;
          break;
        case OptimizerType::kAdagrad: {
          double& a = state[i];
          a += g * g;
          w[i] -= lr * g / (std::sqrt(a) + eps);
          break;
        }
        case OptimizerType::kAdam:
          ApplyAdam(i, g, w, state);
          break;
        case OptimizerType::kFtrl:
          ApplyFtrl(i, g, w, state);
          break;
      }
    }
    if (c_.type == OptimizerType::kAdam) state[2 * dim_] += 1.0;
  }

 private:
  void ApplyAdam(uint32_t i, double g, std::vector<double>& w,
                 std::vector<double>& state) const {
    const double b1 = c_.beta1, b2 = c_.beta2;
    const double t = state[2 * dim_] + 1.0;  // Incremented after the loop.
    double& m = state[i];
    double& v = state[dim_ + i];
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double m_hat = m / (1 - std::pow(b1, t));
    const double v_hat = v / (1 - std::pow(b2, t));
    w[i] -= c_.learning_rate * m_hat / (std::sqrt(v_hat) + c_.epsilon);
  }

  // McMahan et al. 2013, algorithm 1, per coordinate; w is w_{t,i}.
  void ApplyFtrl(uint32_t i, double g, std::vector<double>& w,
                 std::vector<double>& state) const {
    const double alpha = c_.learning_rate, beta = c_.ftrl_beta;
    const double l1 = c_.l1, l2 = c_.l2;
    double& z = state[i];
    double& n = state[dim_ + i];
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * w[i];
    n += g * g;
    if (std::fabs(z) <= l1) {
      w[i] = 0.0;
    } else {
      const double sign = z < 0 ? -1.0 : 1.0;
      w[i] = -(z - sign * l1) / ((beta + std::sqrt(n)) / alpha + l2);
    }
  }

  OptimizerConfig c_;
  uint32_t dim_;
};

// Gradients of varied magnitudes (1e-3 .. 1e2, both signs, some zeros) from
// a generator whose sequence the standard fixes.
class GradientSource {
 public:
  explicit GradientSource(uint32_t seed) : rng_(seed) {}
  float Next() {
    const uint32_t kind = rng_() % 16;
    if (kind == 0) return 0.0f;
    const double exponent = -3.0 + 5.0 * Uniform();
    const double sign = (rng_() & 1) ? -1.0 : 1.0;
    return static_cast<float>(sign * std::pow(10.0, exponent));
  }
  double Uniform() { return (rng_() >> 8) * (1.0 / 16777216.0); }

 private:
  std::mt19937 rng_;
};

// Relative 1e-4 plus absolute 1e-6, plus 1e-5 of `peak`, the largest
// magnitude the value reached so far: a float32 running sum keeps about 7
// digits of its largest partial sum, so a weight that went to 300 and came
// back to 0.1 is only known to ~1e-5 in float32 whatever the optimizer.
::testing::AssertionResult Near(double actual, double expected, double peak) {
  const double tolerance = 1e-4 * std::fabs(expected) + 1e-5 * peak + 1e-6;
  if (std::fabs(actual - expected) <= tolerance) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << actual << " differs from the reference " << expected << " by "
         << std::fabs(actual - expected) << " > " << tolerance;
}

struct OptimizerCase {
  std::string name;
  OptimizerConfig config;
  // Nonzero initial weights, as an initializer gives them.
  bool random_initial_weights;
};

void PrintTo(const OptimizerCase& c, std::ostream* os) { *os << c.name; }

OptimizerConfig Config(OptimizerType type) {
  OptimizerConfig config;
  config.type = type;
  return config;
}

std::vector<OptimizerCase> AllCases() {
  std::vector<OptimizerCase> cases;
  cases.push_back({"SgdDefault", Config(OptimizerType::kSgd), true});
  OptimizerConfig sgd = Config(OptimizerType::kSgd);
  sgd.learning_rate = 0.3f;
  cases.push_back({"SgdLargeRate", sgd, true});
  cases.push_back({"AdagradDefault", Config(OptimizerType::kAdagrad), true});
  OptimizerConfig adagrad = Config(OptimizerType::kAdagrad);
  adagrad.learning_rate = 0.2f;
  adagrad.initial_accumulator = 0.5f;
  adagrad.epsilon = 1e-3f;
  cases.push_back({"AdagradCustom", adagrad, true});
  cases.push_back({"AdamDefault", Config(OptimizerType::kAdam), true});
  OptimizerConfig adam = Config(OptimizerType::kAdam);
  adam.learning_rate = 0.003f;
  adam.beta1 = 0.5f;
  adam.beta2 = 0.9f;
  adam.epsilon = 1e-4f;
  cases.push_back({"AdamCustom", adam, true});
  cases.push_back({"FtrlDefaultFromZero", Config(OptimizerType::kFtrl), false});
  cases.push_back({"FtrlDefault", Config(OptimizerType::kFtrl), true});
  OptimizerConfig ftrl = Config(OptimizerType::kFtrl);
  ftrl.learning_rate = 0.05f;
  ftrl.ftrl_beta = 0.5f;
  ftrl.l1 = 0.1f;
  ftrl.l2 = 0.2f;
  cases.push_back({"FtrlL1L2FromZero", ftrl, false});
  ftrl.l1 = 2.0f;  // Large enough to zero many coordinates.
  ftrl.l2 = 1.0f;
  cases.push_back({"FtrlStrongL1", ftrl, true});
  return cases;
}

class OptimizerTest : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(OptimizerTest, ManyStepsMatchFloat64Reference) {
  const OptimizerCase& c = GetParam();
  const std::unique_ptr<Optimizer> optimizer =
      Optimizer::Create(c.config, kDim);
  ASSERT_NE(optimizer, nullptr);
  ASSERT_EQ(optimizer->dim(), kDim);
  const uint32_t state_dim = optimizer->state_dim();
  ASSERT_EQ(state_dim, OptimizerStateDim(c.config.type, kDim));
  const ReferenceOptimizer reference(c.config, kDim);

  GradientSource source(/*seed=*/20240611);
  std::vector<float> w(kDim + 1, kCanary), state(state_dim + 1, kCanary);
  std::vector<double> ref_w(kDim, 0.0);
  for (uint32_t i = 0; i < kDim; ++i) {
    w[i] = c.random_initial_weights ? static_cast<float>(source.Uniform() - 0.5)
                                    : 0.0f;
    ref_w[i] = w[i];
  }
  optimizer->InitState(state.data());
  std::vector<double> ref_state = reference.InitState();
  for (uint32_t i = 0; i < state_dim; ++i) {
    ASSERT_EQ(state[i], static_cast<float>(ref_state[i])) << i;
  }

  int zero_weights = 0;
  std::vector<double> peak_w(kDim, 0.0), peak_state(state_dim, 0.0);
  std::vector<float> gradient(kDim);
  for (int step = 0; step < kSteps; ++step) {
    for (float& g : gradient) g = source.Next();
    optimizer->Apply(gradient.data(), w.data(), state.data());
    reference.Apply(gradient, ref_w, ref_state);
    for (uint32_t i = 0; i < kDim; ++i) {
      peak_w[i] = std::max(peak_w[i], std::fabs(ref_w[i]));
      ASSERT_TRUE(Near(w[i], ref_w[i], peak_w[i]))
          << "step " << step << " weight " << i;
      if (w[i] == 0.0f) ++zero_weights;
    }
    for (uint32_t i = 0; i < state_dim; ++i) {
      peak_state[i] = std::max(peak_state[i], std::fabs(ref_state[i]));
      ASSERT_TRUE(Near(state[i], ref_state[i], peak_state[i]))
          << "step " << step << " state " << i;
    }
    ASSERT_EQ(w[kDim], kCanary);
    ASSERT_EQ(state[state_dim], kCanary);
  }
  if (c.config.type == OptimizerType::kAdam) {
    EXPECT_EQ(state[2 * kDim], static_cast<float>(kSteps));
  }
  if (c.config.type == OptimizerType::kFtrl && c.config.l1 >= 1.0f) {
    // Strong L1 must produce exact zeros, not merely small weights.
    EXPECT_GT(zero_weights, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, OptimizerTest, ::testing::ValuesIn(AllCases()),
    [](const ::testing::TestParamInfo<OptimizerCase>& info) {
      return info.param.name;
    });

TEST(OptimizerStateTest, StateDimensionsAndInitialStateFollowTheLayout) {
  OptimizerConfig config;
  config.initial_accumulator = 0.25f;
  const struct {
    OptimizerType type;
    uint32_t state_dim;
  } cases[] = {{OptimizerType::kSgd, 0},
               {OptimizerType::kAdagrad, kDim},
               {OptimizerType::kAdam, 2 * kDim + 1},
               {OptimizerType::kFtrl, 2 * kDim}};
  for (const auto& c : cases) {
    config.type = c.type;
    const auto optimizer = Optimizer::Create(config, kDim);
    ASSERT_NE(optimizer, nullptr);
    EXPECT_EQ(optimizer->state_dim(), c.state_dim);
    EXPECT_EQ(OptimizerStateDim(c.type, kDim), c.state_dim);
    std::vector<float> state(c.state_dim + 1, kCanary);
    optimizer->InitState(state.data());
    const float expected = c.type == OptimizerType::kAdagrad ? 0.25f : 0.0f;
    for (uint32_t i = 0; i < c.state_dim; ++i) EXPECT_EQ(state[i], expected);
    EXPECT_EQ(state[c.state_dim], kCanary);
  }
}

TEST(OptimizerSingleStepTest, SgdSubtractsRateTimesGradient) {
  OptimizerConfig config = Config(OptimizerType::kSgd);
  config.learning_rate = 0.5f;
  const auto optimizer = Optimizer::Create(config, 2);
  float w[2] = {1.0f, -1.0f};
  const float g[2] = {2.0f, -4.0f};
  optimizer->Apply(g, w, nullptr);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[1], 1.0f);
}

TEST(OptimizerSingleStepTest, AdamFirstStepMovesByAboutTheRate) {
  // After one step m_hat = g and v_hat = g^2: w moves by lr * sign(g).
  OptimizerConfig config = Config(OptimizerType::kAdam);
  config.learning_rate = 0.1f;
  const auto optimizer = Optimizer::Create(config, 2);
  float w[2] = {0.0f, 0.0f};
  std::vector<float> state(optimizer->state_dim());
  optimizer->InitState(state.data());
  const float g[2] = {3.0f, -0.001f};
  optimizer->Apply(g, w, state.data());
  EXPECT_NEAR(w[0], -0.1f, 1e-6f);
  EXPECT_NEAR(w[1], 0.1f, 1e-4f);
  EXPECT_EQ(state[4], 1.0f);
}

TEST(OptimizerSingleStepTest, FtrlFirstStepFromZeroHasClosedForm) {
  // From z = n = w = 0: z = g, n = g^2, w = -(g - sgn(g) l1) /
  // ((beta + |g|) / alpha + l2), or 0 when |g| <= l1.
  OptimizerConfig config = Config(OptimizerType::kFtrl);
  config.learning_rate = 0.5f;
  config.ftrl_beta = 1.0f;
  config.l1 = 0.5f;
  config.l2 = 2.0f;
  const auto optimizer = Optimizer::Create(config, 2);
  float w[2] = {0.0f, 0.0f};
  std::vector<float> state(optimizer->state_dim());
  optimizer->InitState(state.data());
  const float g[2] = {3.0f, -0.25f};
  optimizer->Apply(g, w, state.data());
  EXPECT_FLOAT_EQ(w[0], -(3.0f - 0.5f) / ((1.0f + 3.0f) / 0.5f + 2.0f));
  EXPECT_EQ(w[1], 0.0f);  // |z| = 0.25 <= l1.
  EXPECT_FLOAT_EQ(state[0], 3.0f);
  EXPECT_FLOAT_EQ(state[1], -0.25f);
  EXPECT_FLOAT_EQ(state[2], 9.0f);
  EXPECT_FLOAT_EQ(state[3], 0.0625f);
}

}  // namespace
}  // namespace strata
