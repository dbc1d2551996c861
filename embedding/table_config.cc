#include "embedding/table_config.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace strata {
namespace {

bool IsValidNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

absl::Status CheckFinite(const char* field, float value) {
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table config: ", field, " must be finite"));
  }
  return absl::OkStatus();
}

absl::Status InvalidPolicy(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("table config: ", field, " ", problem));
}

// The admission and eviction fields, named as in the TableConfig proto.
absl::Status ValidatePolicies(const AdmissionConfig& admit,
                              const EvictionConfig& evict) {
  if (admit.min_count > kMaxAdmitMinCount) {
    return InvalidPolicy("admit_min_count",
                         absl::StrCat(admit.min_count, " is over the maximum ",
                                      kMaxAdmitMinCount));
  }
  if (!(admit.probability > 0.0f && admit.probability <= 1.0f)) {
    return InvalidPolicy("admit_probability",
                         absl::StrCat(admit.probability, " is outside (0, 1]"));
  }
  if (admit.sketch_width > kMaxSketchWidth) {
    return InvalidPolicy(
        "admit_sketch_width",
        absl::StrCat(admit.sketch_width, " is over the maximum ",
                     kMaxSketchWidth));
  }
  if (admit.sketch_depth > kMaxSketchDepth) {
    return InvalidPolicy(
        "admit_sketch_depth",
        absl::StrCat(admit.sketch_depth, " is over the maximum ",
                     kMaxSketchDepth));
  }
  if (!std::isfinite(evict.min_norm) || evict.min_norm < 0.0f) {
    return InvalidPolicy(
        "evict_min_norm",
        absl::StrCat(evict.min_norm, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view OptimizerName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return "sgd";
    case OptimizerType::kAdagrad:
      return "adagrad";
    case OptimizerType::kAdam:
      return "adam";
    case OptimizerType::kFtrl:
      return "ftrl";
  }
  return "unknown";
}

absl::string_view InitializerName(InitializerType type) {
  switch (type) {
    case InitializerType::kZeros:
      return "zeros";
    case InitializerType::kConstant:
      return "constant";
    case InitializerType::kUniform:
      return "uniform";
    case InitializerType::kTruncatedNormal:
      return "truncated_normal";
  }
  return "unknown";
}

absl::StatusOr<OptimizerType> ParseOptimizerName(absl::string_view name) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdagrad,
                             OptimizerType::kAdam, OptimizerType::kFtrl}) {
    if (name == OptimizerName(type)) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown optimizer '", name, "' (expected sgd, adagrad, adam or ftrl)"));
}

absl::StatusOr<InitializerType> ParseInitializerName(absl::string_view name) {
  for (InitializerType type :
       {InitializerType::kZeros, InitializerType::kConstant,
        InitializerType::kUniform, InitializerType::kTruncatedNormal}) {
    if (name == InitializerName(type)) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown initializer '", name,
      "' (expected zeros, constant, uniform or truncated_normal)"));
}

uint32_t OptimizerStateDim(OptimizerType type, uint32_t dim) {
  switch (type) {
    case OptimizerType::kSgd:
      return 0;
    case OptimizerType::kAdagrad:
      return dim;
    case OptimizerType::kAdam:
      return 2 * dim + 1;  // m, v, and the row's step count.
    case OptimizerType::kFtrl:
      return 2 * dim;  // z, n.
  }
  return 0;
}

absl::Status ValidateTableConfig(const EmbeddingTableConfig& config) {
  if (config.name.empty()) {
    return absl::InvalidArgumentError("table config: name is empty");
  }
  if (config.name.size() > kMaxTableNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table config: name is longer than ", kMaxTableNameLength, " bytes"));
  }
  if (config.name == "." || config.name == "..") {
    // They name directories wherever a table's name becomes a path.
    return absl::InvalidArgumentError(
        absl::StrCat("table config: name '", config.name, "' is reserved"));
  }
  for (char c : config.name) {
    if (!IsValidNameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("table config: name '", config.name,
                       "' may only hold letters, digits, '_', '-' and '.'"));
    }
  }
  if (config.dim == 0 || config.dim > kMaxTableDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table config: dim ", config.dim, " is outside 1..", kMaxTableDim));
  }
  const InitializerConfig& init = config.initializer;
  const OptimizerConfig& opt = config.optimizer;
  for (auto [field, value] : std::vector<std::pair<const char*, float>>{
           {"initializer.value", init.value},
           {"initializer.min", init.min},
           {"initializer.max", init.max},
           {"initializer.mean", init.mean},
           {"initializer.stddev", init.stddev},
           {"optimizer.learning_rate", opt.learning_rate},
           {"optimizer.initial_accumulator", opt.initial_accumulator},
           {"optimizer.epsilon", opt.epsilon},
           {"optimizer.beta1", opt.beta1},
           {"optimizer.beta2", opt.beta2},
           {"optimizer.ftrl_beta", opt.ftrl_beta},
           {"optimizer.l1", opt.l1},
           {"optimizer.l2", opt.l2}}) {
    if (absl::Status s = CheckFinite(field, value); !s.ok()) return s;
  }
  // Bounds that keep rows finite: an initial value or a learning rate past
  // them makes values overflow float32 (and store Inf) within few pushes.
  for (auto [field, value, bound] :
       std::vector<std::tuple<const char*, float, float>>{
           {"initializer.value", init.value, kMaxInitialMagnitude},
           {"initializer.min", init.min, kMaxInitialMagnitude},
           {"initializer.max", init.max, kMaxInitialMagnitude},
           {"initializer.mean", init.mean, kMaxInitialMagnitude},
           {"initializer.stddev", init.stddev, kMaxInitialMagnitude},
           {"optimizer.learning_rate", opt.learning_rate, kMaxLearningRate},
           {"optimizer.initial_accumulator", opt.initial_accumulator,
            kMaxAccumulator},
           {"optimizer.epsilon", opt.epsilon, 1.0f},
           {"optimizer.ftrl_beta", opt.ftrl_beta, kMaxRegularization},
           {"optimizer.l1", opt.l1, kMaxRegularization},
           {"optimizer.l2", opt.l2, kMaxRegularization}}) {
    if (std::fabs(value) > bound) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table config: ", field, " ", value, " is over the limit of ", bound,
          " in magnitude (rows would overflow float32)"));
    }
  }
  if (init.type == InitializerType::kUniform && !(init.min <= init.max)) {
    return absl::InvalidArgumentError(
        "table config: uniform initializer needs min <= max");
  }
  if (init.type == InitializerType::kTruncatedNormal && init.stddev < 0) {
    return absl::InvalidArgumentError(
        "table config: truncated_normal initializer needs stddev >= 0");
  }
  if (opt.learning_rate <= 0) {
    return absl::InvalidArgumentError(
        "table config: optimizer.learning_rate must be > 0");
  }
  if (opt.type == OptimizerType::kAdagrad && opt.initial_accumulator < 0) {
    return absl::InvalidArgumentError(
        "table config: optimizer.initial_accumulator must be >= 0");
  }
  if (opt.type == OptimizerType::kAdam &&
      !(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1)) {
    return absl::InvalidArgumentError(
        "table config: Adam needs 0 <= beta1, beta2 < 1");
  }
  if (opt.type == OptimizerType::kFtrl &&
      (opt.l1 < 0 || opt.l2 < 0 || opt.ftrl_beta < 0)) {
    return absl::InvalidArgumentError(
        "table config: FTRL needs l1, l2 and ftrl_beta >= 0");
  }
  if (config.memory_budget_bytes != 0 &&
      config.memory_budget_bytes < kMinMemoryBudgetBytes) {
    return InvalidPolicy(
        "memory_budget_bytes",
        absl::StrCat(config.memory_budget_bytes, " is under the minimum ",
                     kMinMemoryBudgetBytes, " (0: no budget)"));
  }
  return ValidatePolicies(config.admission, config.eviction);
}

bool SameTableConfig(const EmbeddingTableConfig& a,
                     const EmbeddingTableConfig& b) {
  return SerializeTableConfig(a) == SerializeTableConfig(b);
}

std::string SerializeTableConfig(const EmbeddingTableConfig& c) {
  const InitializerConfig& i = c.initializer;
  const OptimizerConfig& o = c.optimizer;
  // Floats are written with enough digits to round-trip exactly.
  auto f = [](float v) { return absl::StrFormat("%.9g", v); };
  return absl::StrCat(
      "name=", c.name, " dim=", c.dim, " seed=", c.seed,
      " initializer=", InitializerName(i.type), " init_value=", f(i.value),
      " init_min=", f(i.min), " init_max=", f(i.max), " init_mean=", f(i.mean),
      " init_stddev=", f(i.stddev), " optimizer=", OptimizerName(o.type),
      " lr=", f(o.learning_rate),
      " initial_accumulator=", f(o.initial_accumulator),
      " epsilon=", f(o.epsilon), " beta1=", f(o.beta1), " beta2=", f(o.beta2),
      " ftrl_beta=", f(o.ftrl_beta), " l1=", f(o.l1), " l2=", f(o.l2),
      " admit_min_count=", c.admission.min_count,
      " admit_probability=", f(c.admission.probability),
      " admit_sketch_width=", c.admission.sketch_width,
      " admit_sketch_depth=", c.admission.sketch_depth,
      " evict_after_steps=", c.eviction.after_steps,
      " evict_after_seconds=", c.eviction.after_seconds,
      " evict_min_norm=", f(c.eviction.min_norm),
      " memory_budget_bytes=", c.memory_budget_bytes);
}

namespace {

// The "name=value" fields of a serialized config, in order.
std::vector<std::pair<std::string, std::string>> SplitFields(
    absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (absl::string_view part : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> field = absl::StrSplit(part, '=');
    fields.push_back(std::move(field));
  }
  return fields;
}

// A float field as people write it (0.05, not its exact 0.0500000007),
// unless that would hide how it differs from `other`.
std::string Readable(const std::string& exact, const std::string& other) {
  float value = 0, other_value = 0;
  if (!absl::SimpleAtof(exact, &value) ||
      !absl::SimpleAtof(other, &other_value)) {
    return exact;
  }
  const std::string short_form = absl::StrCat(value);
  return short_form == absl::StrCat(other_value) ? exact : short_form;
}

}  // namespace

std::string TableConfigDifference(const EmbeddingTableConfig& existing,
                                  const EmbeddingTableConfig& requested) {
  const auto have = SplitFields(SerializeTableConfig(existing));
  const auto asked = SplitFields(SerializeTableConfig(requested));
  std::vector<std::string> differences;
  for (size_t i = 0; i < have.size() && i < asked.size(); ++i) {
    if (have[i].second == asked[i].second) continue;
    differences.push_back(absl::StrCat(
        have[i].first, "=", Readable(have[i].second, asked[i].second),
        " (asked ", Readable(asked[i].second, have[i].second), ")"));
  }
  return absl::StrJoin(differences, ", ");
}

namespace {

// Records written before admission and eviction existed lack their fields:
// a missing field keeps its default (off).
bool ParsePolicies(const absl::flat_hash_map<std::string, std::string>& fields,
                   EmbeddingTableConfig& c) {
  auto number = [&fields](const char* name, auto* target) {
    auto it = fields.find(name);
    return it == fields.end() || absl::SimpleAtoi(it->second, target);
  };
  auto real = [&fields](const char* name, float* target) {
    auto it = fields.find(name);
    return it == fields.end() || absl::SimpleAtof(it->second, target);
  };
  return number("admit_min_count", &c.admission.min_count) &&
         real("admit_probability", &c.admission.probability) &&
         number("admit_sketch_width", &c.admission.sketch_width) &&
         number("admit_sketch_depth", &c.admission.sketch_depth) &&
         number("evict_after_steps", &c.eviction.after_steps) &&
         number("evict_after_seconds", &c.eviction.after_seconds) &&
         real("evict_min_norm", &c.eviction.min_norm) &&
         number("memory_budget_bytes", &c.memory_budget_bytes);
}

}  // namespace

absl::StatusOr<EmbeddingTableConfig> ParseTableConfig(absl::string_view text) {
  absl::flat_hash_map<std::string, std::string> fields;
  for (auto& [name, value] : SplitFields(text)) {
    fields[std::move(name)] = std::move(value);
  }
  auto corrupt = [&](absl::string_view field) {
    return absl::DataLossError(
        absl::StrCat("stored table config has a bad '", field, "': ", text));
  };
  EmbeddingTableConfig c;
  c.name = fields["name"];
  if (!absl::SimpleAtoi(fields["dim"], &c.dim)) return corrupt("dim");
  if (!absl::SimpleAtoi(fields["seed"], &c.seed)) return corrupt("seed");
  auto init = ParseInitializerName(fields["initializer"]);
  if (!init.ok()) return corrupt("initializer");
  c.initializer.type = *init;
  auto opt = ParseOptimizerName(fields["optimizer"]);
  if (!opt.ok()) return corrupt("optimizer");
  c.optimizer.type = *opt;
  const std::pair<const char*, float*> floats[] = {
      {"init_value", &c.initializer.value},
      {"init_min", &c.initializer.min},
      {"init_max", &c.initializer.max},
      {"init_mean", &c.initializer.mean},
      {"init_stddev", &c.initializer.stddev},
      {"lr", &c.optimizer.learning_rate},
      {"initial_accumulator", &c.optimizer.initial_accumulator},
      {"epsilon", &c.optimizer.epsilon},
      {"beta1", &c.optimizer.beta1},
      {"beta2", &c.optimizer.beta2},
      {"ftrl_beta", &c.optimizer.ftrl_beta},
      {"l1", &c.optimizer.l1},
      {"l2", &c.optimizer.l2}};
  for (const auto& [field, target] : floats) {
    if (!absl::SimpleAtof(fields[field], target)) return corrupt(field);
  }
  if (!ParsePolicies(fields, c)) return corrupt("admit_* or evict_*");
  return c;
}

}  // namespace strata
