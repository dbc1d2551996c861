#include "embedding/optimizer.h"

#include <cmath>

namespace strata {
namespace {

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& config, uint32_t dim)
      : Optimizer(dim), lr_(config.learning_rate) {}
  uint32_t state_dim() const override { return 0; }
  void InitState(float*) const override {}
  void Apply(const float* __restrict g, float* __restrict w,
             float*) const override {
    const uint32_t n = dim();
    for (uint32_t i = 0; i < n; ++i) w[i] -= lr_ * g[i];
  }

 private:
  float lr_;
};

class AdagradOptimizer final : public Optimizer {
 public:
  AdagradOptimizer(const OptimizerConfig& config, uint32_t dim)
      : Optimizer(dim),
        lr_(config.learning_rate),
        initial_(config.initial_accumulator),
        epsilon_(config.epsilon) {}
  uint32_t state_dim() const override { return dim(); }
  void InitState(float* state) const override {
    for (uint32_t i = 0; i < dim(); ++i) state[i] = initial_;
  }
  void Apply(const float* __restrict g, float* __restrict w,
             float* __restrict acc) const override {
    const uint32_t n = dim();
    for (uint32_t i = 0; i < n; ++i) {
      acc[i] += g[i] * g[i];
      w[i] -= lr_ * g[i] / (std::sqrt(acc[i]) + epsilon_);
    }
  }

 private:
  float lr_, initial_, epsilon_;
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& config, uint32_t dim)
      : Optimizer(dim),
        lr_(config.learning_rate),
        beta1_(config.beta1),
        beta2_(config.beta2),
        epsilon_(config.epsilon) {}
  uint32_t state_dim() const override { return 2 * dim() + 1; }
  void InitState(float* state) const override {
    for (uint32_t i = 0; i < state_dim(); ++i) state[i] = 0.0f;
  }
  void Apply(const float* __restrict g, float* __restrict w,
             float* __restrict state) const override {
    const uint32_t n = dim();
    float* __restrict m = state;
    float* __restrict v = state + n;
    const float step = state[2 * n] + 1.0f;
    state[2 * n] = step;
    const float bias1 = 1.0f - std::pow(beta1_, step);
    const float bias2 = 1.0f - std::pow(beta2_, step);
    for (uint32_t i = 0; i < n; ++i) {
      m[i] = beta1_ * m[i] + (1.0f - beta1_) * g[i];
      v[i] = beta2_ * v[i] + (1.0f - beta2_) * g[i] * g[i];
      const float m_hat = m[i] / bias1;
      const float v_hat = v[i] / bias2;
      w[i] -= lr_ * m_hat / (std::sqrt(v_hat) + epsilon_);
    }
  }

 private:
  float lr_, beta1_, beta2_, epsilon_;
};

class FtrlOptimizer final : public Optimizer {
 public:
  FtrlOptimizer(const OptimizerConfig& config, uint32_t dim)
      : Optimizer(dim),
        alpha_(config.learning_rate),
        beta_(config.ftrl_beta),
        l1_(config.l1),
        l2_(config.l2) {}
  uint32_t state_dim() const override { return 2 * dim(); }
  void InitState(float* state) const override {
    for (uint32_t i = 0; i < state_dim(); ++i) state[i] = 0.0f;
  }
  void Apply(const float* __restrict g, float* __restrict w,
             float* __restrict state) const override {
    float* __restrict z = state;
    float* __restrict n = state + dim();
    const uint32_t count = dim();
    // Branch-free, so that the loop vectorizes: both sides of the l1 test
    // are computed and one is selected.
    for (uint32_t i = 0; i < count; ++i) {
      const float n_new = n[i] + g[i] * g[i];
      const float sqrt_new = std::sqrt(n_new);
      const float sigma = (sqrt_new - std::sqrt(n[i])) / alpha_;
      const float z_new = z[i] + (g[i] - sigma * w[i]);
      z[i] = z_new;
      n[i] = n_new;
      const float shrunk = z_new - std::copysign(l1_, z_new);
      const float w_new = -shrunk / ((beta_ + sqrt_new) / alpha_ + l2_);
      w[i] = std::fabs(z_new) <= l1_ ? 0.0f : w_new;
    }
  }

 private:
  float alpha_, beta_, l1_, l2_;
};

}  // namespace

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerConfig& config,
                                             uint32_t dim) {
  switch (config.type) {
    case OptimizerType::kSgd:
      return std::make_unique<SgdOptimizer>(config, dim);
    case OptimizerType::kAdagrad:
      return std::make_unique<AdagradOptimizer>(config, dim);
    case OptimizerType::kAdam:
      return std::make_unique<AdamOptimizer>(config, dim);
    case OptimizerType::kFtrl:
      return std::make_unique<FtrlOptimizer>(config, dim);
  }
  return nullptr;
}

}  // namespace strata
