#ifndef STRATA_WORKER_MODEL_DENSE_OPTIMIZER_H_
#define STRATA_WORKER_MODEL_DENSE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

struct DenseOptimizerConfig {
  enum class Kind { kAdam, kAdagrad };
  // How the learning rate moves with the step t (from 1):
  //   kConstant:    lr * min(1, t / W)
  //   kInverseSqrt: lr * min(t / W, sqrt(W / t)), the rate of "Attention Is
  //                 All You Need" scaled to peak at lr at step W
  // where W = warmup_steps (0: no warm-up; kInverseSqrt then decays from
  // step 1).
  enum class Schedule { kConstant, kInverseSqrt };
  Kind kind = Kind::kAdam;
  float learning_rate = 1e-3f;
  Schedule schedule = Schedule::kConstant;
  int64_t warmup_steps = 0;
  // Adam.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  // Adagrad.
  float initial_accumulator = 0.1f;
};

// "adam" / "adagrad"; INVALID_ARGUMENT otherwise.
absl::StatusOr<DenseOptimizerConfig::Kind> ParseDenseOptimizerKind(
    absl::string_view name);
// "constant" / "rsqrt"; INVALID_ARGUMENT otherwise.
absl::StatusOr<DenseOptimizerConfig::Schedule> ParseLearningRateSchedule(
    absl::string_view name);

// The learning rate of step `step` (from 1) under `config`'s schedule.
float ScheduledLearningRate(const DenseOptimizerConfig& config, int64_t step);

// The optimizer of the replicated dense parameters. Every rank runs it on
// the same allreduced gradient, so the parameters stay bitwise equal across
// ranks. State (moments, step) is part of a checkpoint. Not thread-safe.
class DenseOptimizer {
 public:
  // INVALID_ARGUMENT for a non-positive learning rate, betas outside
  // [0, 1) or negative warmup_steps.
  static absl::StatusOr<std::unique_ptr<DenseOptimizer>> Create(
      const DenseOptimizerConfig& config, size_t num_parameters);

  // parameters -= update(gradients), at the schedule's rate of the next
  // step. INVALID_ARGUMENT on a size mismatch.
  absl::Status Apply(absl::Span<const float> gradients,
                     absl::Span<float> parameters);

  int64_t steps() const { return steps_; }

  // The state as bytes and back; INVALID_ARGUMENT (DATA_LOSS for a torn
  // blob) when it does not fit this optimizer.
  std::string SerializeState() const;
  absl::Status RestoreState(absl::string_view blob);

 private:
  DenseOptimizer(const DenseOptimizerConfig& config, size_t num_parameters);

  const DenseOptimizerConfig config_;
  int64_t steps_ = 0;
  std::vector<float> first_;   // Adam m, Adagrad accumulator
  std::vector<float> second_;  // Adam v
};

}  // namespace strata

#endif  // STRATA_WORKER_MODEL_DENSE_OPTIMIZER_H_
