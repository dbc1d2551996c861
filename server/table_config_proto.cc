#include "server/table_config_proto.h"

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

void SetIfNonZero(float wire, float* field) {
  if (wire != 0.0f) *field = wire;
}

}  // namespace

absl::StatusOr<EmbeddingTableConfig> TableConfigFromProto(
    const v1::TableConfig& proto) {
  EmbeddingTableConfig config;
  config.name = proto.name();
  config.dim = proto.dim();
  config.seed = proto.seed();
  const v1::InitializerConfig& init = proto.initializer();
  switch (init.type()) {
    case v1::INITIALIZER_UNSPECIFIED:
    case v1::ZEROS:
      config.initializer.type = InitializerType::kZeros;
      break;
    case v1::CONSTANT:
      config.initializer.type = InitializerType::kConstant;
      break;
    case v1::UNIFORM:
      config.initializer.type = InitializerType::kUniform;
      break;
    case v1::TRUNCATED_NORMAL:
      config.initializer.type = InitializerType::kTruncatedNormal;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown initializer type ", init.type()));
  }
  config.initializer.value = init.value();
  if (init.min() != 0.0f || init.max() != 0.0f) {
    config.initializer.min = init.min();
    config.initializer.max = init.max();
  }
  config.initializer.mean = init.mean();
  SetIfNonZero(init.stddev(), &config.initializer.stddev);

  const v1::OptimizerConfig& opt = proto.optimizer();
  switch (opt.type()) {
    case v1::SGD:
      config.optimizer.type = OptimizerType::kSgd;
      break;
    case v1::OPTIMIZER_UNSPECIFIED:
    case v1::ADAGRAD:
      config.optimizer.type = OptimizerType::kAdagrad;
      break;
    case v1::ADAM:
      config.optimizer.type = OptimizerType::kAdam;
      break;
    case v1::FTRL:
      config.optimizer.type = OptimizerType::kFtrl;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown optimizer type ", opt.type()));
  }
  SetIfNonZero(opt.learning_rate(), &config.optimizer.learning_rate);
  SetIfNonZero(opt.initial_accumulator(),
               &config.optimizer.initial_accumulator);
  SetIfNonZero(opt.epsilon(), &config.optimizer.epsilon);
  SetIfNonZero(opt.beta1(), &config.optimizer.beta1);
  SetIfNonZero(opt.beta2(), &config.optimizer.beta2);
  SetIfNonZero(opt.ftrl_beta(), &config.optimizer.ftrl_beta);
  config.optimizer.l1 = opt.l1();
  config.optimizer.l2 = opt.l2();
  config.admission.min_count = proto.admit_min_count();
  SetIfNonZero(proto.admit_probability(), &config.admission.probability);
  config.admission.sketch_width = proto.admit_sketch_width();
  config.admission.sketch_depth = proto.admit_sketch_depth();
  config.eviction.after_steps = proto.evict_after_steps();
  config.eviction.after_seconds = proto.evict_after_seconds();
  config.eviction.min_norm = proto.evict_min_norm();
  config.memory_budget_bytes = proto.memory_budget_bytes();
  return config;
}

v1::TableConfig TableConfigToProto(const EmbeddingTableConfig& config) {
  v1::TableConfig proto;
  proto.set_name(config.name);
  proto.set_dim(config.dim);
  proto.set_seed(config.seed);
  v1::InitializerConfig* init = proto.mutable_initializer();
  switch (config.initializer.type) {
    case InitializerType::kZeros:
      init->set_type(v1::ZEROS);
      break;
    case InitializerType::kConstant:
      init->set_type(v1::CONSTANT);
      break;
    case InitializerType::kUniform:
      init->set_type(v1::UNIFORM);
      break;
    case InitializerType::kTruncatedNormal:
      init->set_type(v1::TRUNCATED_NORMAL);
      break;
  }
  init->set_value(config.initializer.value);
  init->set_min(config.initializer.min);
  init->set_max(config.initializer.max);
  init->set_mean(config.initializer.mean);
  init->set_stddev(config.initializer.stddev);
  v1::OptimizerConfig* opt = proto.mutable_optimizer();
  switch (config.optimizer.type) {
    case OptimizerType::kSgd:
      opt->set_type(v1::SGD);
      break;
    case OptimizerType::kAdagrad:
      opt->set_type(v1::ADAGRAD);
      break;
    case OptimizerType::kAdam:
      opt->set_type(v1::ADAM);
      break;
    case OptimizerType::kFtrl:
      opt->set_type(v1::FTRL);
      break;
  }
  opt->set_learning_rate(config.optimizer.learning_rate);
  opt->set_initial_accumulator(config.optimizer.initial_accumulator);
  opt->set_epsilon(config.optimizer.epsilon);
  opt->set_beta1(config.optimizer.beta1);
  opt->set_beta2(config.optimizer.beta2);
  opt->set_ftrl_beta(config.optimizer.ftrl_beta);
  opt->set_l1(config.optimizer.l1);
  opt->set_l2(config.optimizer.l2);
  proto.set_admit_min_count(config.admission.min_count);
  proto.set_admit_probability(config.admission.probability);
  proto.set_admit_sketch_width(config.admission.sketch_width);
  proto.set_admit_sketch_depth(config.admission.sketch_depth);
  proto.set_evict_after_steps(config.eviction.after_steps);
  proto.set_evict_after_seconds(config.eviction.after_seconds);
  proto.set_evict_min_norm(config.eviction.min_norm);
  proto.set_memory_budget_bytes(config.memory_budget_bytes);
  return proto;
}

}  // namespace strata
