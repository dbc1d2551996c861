#ifndef STRATA_EMBEDDING_OPTIMIZER_H_
#define STRATA_EMBEDDING_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "embedding/table_config.h"

namespace strata {

// A server-side sparse optimizer: updates one row in place from its
// gradient. Each row carries its own state (`state_dim()` floats). Stateless
// apart from the config, so one instance serves all threads.
//
// Update rules, per coordinate, with g the gradient and lr the rate:
//   SGD:      w -= lr * g
//   Adagrad:  a += g^2;  w -= lr * g / (sqrt(a) + eps)       (a starts at
//             initial_accumulator)
//   Adam:     t += 1;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//             w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), with t
//             counted per row ("lazy" Adam, as sparse Adam in TF and PyTorch)
//   FTRL:     McMahan et al. 2013, "Ad Click Prediction", algorithm 1, with
//             alpha = lr, beta, l1, l2.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  static std::unique_ptr<Optimizer> Create(const OptimizerConfig& config,
                                           uint32_t dim);

  uint32_t dim() const { return dim_; }
  virtual uint32_t state_dim() const = 0;
  // Writes the state of a fresh row.
  virtual void InitState(float* state) const = 0;
  // Applies `gradient` (dim floats) to `weights` (dim floats) and `state`.
  virtual void Apply(const float* gradient, float* weights,
                     float* state) const = 0;

 protected:
  explicit Optimizer(uint32_t dim) : dim_(dim) {}

 private:
  uint32_t dim_;
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_OPTIMIZER_H_
