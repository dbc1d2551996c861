#include "worker/training/feature_tables.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config_field_error.h"
#include "common/file_system.h"
#include "yaml-cpp/yaml.h"

namespace strata {
namespace {

// "C7" -> 6; -1 for anything else.
int FieldIndex(absl::string_view name, int num_fields) {
  name = absl::StripAsciiWhitespace(name);
  if (name.size() < 2 || (name[0] != 'C' && name[0] != 'c')) return -1;
  int number = 0;
  if (!absl::SimpleAtoi(name.substr(1), &number)) return -1;
  return number >= 1 && number <= num_fields ? number - 1 : -1;
}

// One item of `fields`: "C7" or a range "C1-C10", appended to *fields.
absl::Status AddFields(absl::string_view item, int num_fields,
                       std::vector<int>* fields) {
  std::vector<absl::string_view> ends = absl::StrSplit(item, '-');
  if (ends.size() > 2) return absl::InvalidArgumentError("");
  const int first = FieldIndex(ends.front(), num_fields);
  const int last = FieldIndex(ends.back(), num_fields);
  if (first < 0 || last < first) return absl::InvalidArgumentError("");
  for (int f = first; f <= last; ++f) fields->push_back(f);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ParseFields(const YAML::Node& node,
                                             absl::string_view field,
                                             int num_fields,
                                             const ConfigFieldError& error) {
  // Nodes are handles: copies refer to the same document.
  std::vector<YAML::Node> items;
  if (node.IsScalar()) {
    items.push_back(node);
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) items.push_back(item);
  }
  if (items.empty()) {
    return error(field, "must list fields, e.g. [C1-C10, C14]");
  }
  std::vector<int> fields;
  for (const YAML::Node& item : items) {
    if (!item.IsScalar() ||
        !AddFields(item.Scalar(), num_fields, &fields).ok()) {
      return error(
          field,
          absl::StrCat("\"", item.IsScalar() ? item.Scalar() : "(not a name)",
                       "\" is not a field name or range of C1..C", num_fields));
    }
  }
  return fields;
}

// A setter of one TableConfig key from its scalar text; INVALID_ARGUMENT
// (with the problem only) on a bad value.
using Setter = std::function<absl::Status(absl::string_view, v1::TableConfig&)>;

template <typename T>
absl::StatusOr<T> Number(absl::string_view text) {
  T value{};
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    // Stored as float: nan, inf and 1e300 are not numbers a table takes.
    ok = absl::SimpleAtod(text, &value) && std::isfinite(value) &&
         std::abs(value) <= std::numeric_limits<float>::max();
  } else {
    ok = absl::SimpleAtoi(text, &value);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a ",
                     std::is_floating_point_v<T> ? "finite number"
                                                 : "non-negative integer"));
  }
  return value;
}

// Setter of a numeric field: set(config, value).
template <typename T, typename Set>
Setter NumberSetter(Set set) {
  return [set](absl::string_view text, v1::TableConfig& config) {
    absl::StatusOr<T> value = Number<T>(text);
    if (!value.ok()) return value.status();
    set(config, *value);
    return absl::OkStatus();
  };
}

const std::map<std::string, Setter>& Setters() {
  using C = v1::TableConfig;
  static const auto* setters = new std::map<std::string, Setter>{
      {"learning_rate", NumberSetter<double>([](C& c, double v) {
         c.mutable_optimizer()->set_learning_rate(static_cast<float>(v));
       })},
      {"initial_accumulator", NumberSetter<double>([](C& c, double v) {
         c.mutable_optimizer()->set_initial_accumulator(static_cast<float>(v));
       })},
      {"init_stddev", NumberSetter<double>([](C& c, double v) {
         c.mutable_initializer()->set_type(v1::TRUNCATED_NORMAL);
         c.mutable_initializer()->set_stddev(static_cast<float>(v));
       })},
      {"admit_min_count", NumberSetter<uint32_t>([](C& c, uint32_t v) {
         c.set_admit_min_count(v);
       })},
      {"admit_probability", NumberSetter<double>([](C& c, double v) {
         c.set_admit_probability(static_cast<float>(v));
       })},
      {"admit_sketch_width", NumberSetter<uint32_t>([](C& c, uint32_t v) {
         c.set_admit_sketch_width(v);
       })},
      {"admit_sketch_depth", NumberSetter<uint32_t>([](C& c, uint32_t v) {
         c.set_admit_sketch_depth(v);
       })},
      {"evict_after_steps", NumberSetter<uint64_t>([](C& c, uint64_t v) {
         c.set_evict_after_steps(v);
       })},
      {"evict_after_seconds", NumberSetter<uint64_t>([](C& c, uint64_t v) {
         c.set_evict_after_seconds(v);
       })},
      {"evict_min_norm", NumberSetter<double>([](C& c, double v) {
         c.set_evict_min_norm(static_cast<float>(v));
       })},
      {"memory_budget_mb", [](absl::string_view text, C& c) {
         absl::StatusOr<uint64_t> mib = Number<uint64_t>(text);
         if (!mib.ok()) return mib.status();
         // The server checks the budget against the machine; here only
         // that bytes do not wrap.
         if (*mib > (uint64_t{1} << 40)) {
           return absl::InvalidArgumentError("is over 2^40 MiB");
         }
         c.set_memory_budget_bytes(*mib << 20);
         return absl::OkStatus();
       }}};
  return *setters;
}

// Sets the optimizer of `config` to `name`. Another optimizer's settings
// do not carry over (zero is the server's default), the learning rate does,
// and Adagrad takes the defaults' initial accumulator.
absl::Status SetOptimizer(absl::string_view name,
                          const v1::TableConfig& defaults,
                          v1::TableConfig& config) {
  absl::StatusOr<v1::OptimizerType> type = ParseOptimizerType(name);
  if (!type.ok()) return type.status();
  if (*type == config.optimizer().type()) return absl::OkStatus();
  const float rate = config.optimizer().learning_rate();
  config.mutable_optimizer()->Clear();
  config.mutable_optimizer()->set_type(*type);
  config.mutable_optimizer()->set_learning_rate(rate);
  if (*type == v1::ADAGRAD) {
    config.mutable_optimizer()->set_initial_accumulator(
        defaults.optimizer().initial_accumulator());
  }
  return absl::OkStatus();
}

// One key of a table other than `fields` and `optimizer` (applied before
// the others, whatever their order in the file).
absl::Status ParseTableKey(const std::string& key, const std::string& text,
                           int embedding_dim, FeatureTable& table) {
  if (key == "name") {
    if (text.empty()) return absl::InvalidArgumentError("is empty");
    table.name = text;
    return absl::OkStatus();
  }
  if (key == "dim") {
    int dim = 0;
    if (!absl::SimpleAtoi(text, &dim) || dim < 1 || dim > embedding_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          text, " is not in [1, --embedding_dim=", embedding_dim,
          "]: a narrower table's rows enter the interaction zero-padded to "
          "the model's width"));
    }
    table.config.set_dim(static_cast<uint32_t>(dim));
    return absl::OkStatus();
  }
  auto setter = Setters().find(key);
  if (setter == Setters().end()) {
    return absl::InvalidArgumentError(
        "unknown key (see strata-worker --help for the keys)");
  }
  return setter->second(text, table.config);
}

absl::StatusOr<FeatureTable> ParseTable(const YAML::Node& node,
                                        const std::string& field,
                                        const v1::TableConfig& defaults,
                                        int embedding_dim, int num_fields,
                                        const ConfigFieldError& error) {
  if (!node.IsMap()) return error(field, "must be a map with name and fields");
  FeatureTable table;
  table.config = defaults;
  table.config.set_dim(static_cast<uint32_t>(embedding_dim));
  const YAML::Node optimizer = node["optimizer"];
  if (optimizer.IsDefined()) {
    const std::string key_field = absl::StrCat(field, ".optimizer");
    if (!optimizer.IsScalar()) return error(key_field, "must be a scalar");
    absl::Status s = SetOptimizer(optimizer.Scalar(), defaults, table.config);
    if (!s.ok()) return error(key_field, s.message());
  }
  bool has_fields = false;
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const std::string key_field = absl::StrCat(field, ".", key);
    const YAML::Node& value = entry.second;
    if (key == "optimizer") continue;
    if (key == "fields") {
      absl::StatusOr<std::vector<int>> fields =
          ParseFields(value, key_field, num_fields, error);
      if (!fields.ok()) return fields.status();
      table.fields = std::move(*fields);
      has_fields = true;
      continue;
    }
    if (!value.IsScalar()) return error(key_field, "must be a scalar");
    absl::Status s = ParseTableKey(key, value.Scalar(), embedding_dim, table);
    if (!s.ok()) return error(key_field, s.message());
  }
  if (table.name.empty()) return error(field, "has no name");
  if (!has_fields) return error(field, "has no fields");
  if (table.config.optimizer().type() != v1::ADAGRAD) {
    table.config.mutable_optimizer()->set_initial_accumulator(0);
  }
  table.config.set_name(table.name);
  return table;
}

absl::StatusOr<std::vector<FeatureTable>> ParseRoot(
    const YAML::Node& root, absl::string_view path,
    const v1::TableConfig& defaults, int embedding_dim, int num_fields) {
  const ConfigFieldError error("model config", path);
  if (!root.IsMap()) return error("(top)", "must be a map with 'tables'");
  for (const auto& entry : root) {
    if (!entry.first.IsScalar() || entry.first.Scalar() != "tables") {
      return error(entry.first.IsScalar() ? entry.first.Scalar() : "(top)",
                   "unknown key (the file holds 'tables')");
    }
  }
  const YAML::Node tables = root["tables"];
  if (!tables.IsDefined() || !tables.IsSequence() || tables.size() == 0) {
    return error("tables", "must be a non-empty list");
  }
  std::vector<FeatureTable> parsed;
  std::vector<std::string> owner(num_fields);
  absl::flat_hash_set<std::string> names;
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::string field = absl::StrCat("tables[", t, "]");
    absl::StatusOr<FeatureTable> table = ParseTable(
        tables[t], field, defaults, embedding_dim, num_fields, error);
    if (!table.ok()) return table.status();
    if (!names.insert(table->name).second) {
      return error(absl::StrCat(field, ".name"),
                   absl::StrCat("\"", table->name, "\" names two tables"));
    }
    for (int f : table->fields) {
      if (!owner[f].empty()) {
        return error(absl::StrCat(field, ".fields"),
                     owner[f] == table->name
                         ? absl::StrCat("C", f + 1, " is listed twice")
                         : absl::StrCat("C", f + 1, " is also in table \"",
                                        owner[f], "\""));
      }
      owner[f] = table->name;
    }
    parsed.push_back(std::move(*table));
  }
  for (int f = 0; f < num_fields; ++f) {
    if (owner[f].empty()) {
      return error("tables", absl::StrCat("C", f + 1, " is in no table"));
    }
  }
  return parsed;
}

}  // namespace

absl::StatusOr<v1::OptimizerType> ParseOptimizerType(absl::string_view name) {
  if (name == "sgd") return v1::SGD;
  if (name == "adagrad") return v1::ADAGRAD;
  if (name == "adam") return v1::ADAM;
  if (name == "ftrl") return v1::FTRL;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown \"", name, "\" (want sgd, adagrad, adam or ftrl)"));
}

absl::StatusOr<std::vector<FeatureTable>> ParseFeatureTables(
    absl::string_view text, absl::string_view path,
    const v1::TableConfig& defaults, int embedding_dim, int num_fields) {
  // yaml-cpp reports malformed documents by throwing; nothing else here does.
  try {
    return ParseRoot(YAML::Load(std::string(text)), path, defaults,
                     embedding_dim, num_fields);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config ", path, ": line ", e.mark.line + 1,
                     ", column ", e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<std::vector<FeatureTable>> ReadFeatureTables(
    FileSystem* fs, const std::string& path, const v1::TableConfig& defaults,
    int embedding_dim, int num_fields) {
  absl::StatusOr<std::string> text = fs->ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read model config ", path, ": ",
                                     text.status().message()));
  }
  if (text->size() > kMaxModelConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config ", path, " is ", text->size(),
                     " bytes, over the limit of ", kMaxModelConfigBytes));
  }
  return ParseFeatureTables(*text, path, defaults, embedding_dim, num_fields);
}

}  // namespace strata
