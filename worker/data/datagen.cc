#include "worker/data/datagen.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "worker/data/learnable_ceiling.h"
#include "worker/data/metrics.h"

namespace strata {
namespace {

constexpr uint64_t kTrainStream = 0;
constexpr uint64_t kHoldoutStream = 1;
constexpr size_t kFlushBytes = 1 << 20;
constexpr int kMaxFiles = 100000;

absl::Status FileError(const std::string& what, const std::string& path) {
  const int error = errno;
  const std::string message =
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error));
  if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

// A file written through a buffer; every failure is a Status.
class OutputFile {
 public:
  OutputFile() = default;
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  absl::Status Open(const std::string& path) {
    path_ = path;
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) return FileError("create", path);
    return absl::OkStatus();
  }
  absl::Status Write(absl::string_view data) {
    if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
      return FileError("write", path_);
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return FileError("write", path_);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

void AppendInt(int64_t value, std::string* out) {
  char buffer[24];
  char* end = buffer + sizeof(buffer);
  char* p = end;
  const bool negative = value < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(value)
                                : static_cast<uint64_t>(value);
  do {
    *--p = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  if (negative) *--p = '-';
  out->append(p, end);
}

void AppendHex8(uint32_t value, std::string* out) {
  static const char kDigits[] = "0123456789abcdef";
  char buffer[8];
  for (int i = 7; i >= 0; --i) {
    buffer[i] = kDigits[value & 0xF];
    value >>= 4;
  }
  out->append(buffer, 8);
}

// Sees each row written, with its label.
using RowObserver = std::function<void(const SyntheticRow&, bool label)>;

PlantedMetrics Measure(const std::vector<float>& labels,
                       const std::vector<double>& probabilities) {
  PlantedMetrics metrics;
  metrics.rows = static_cast<int64_t>(labels.size());
  double positives = 0;
  for (float y : labels) positives += y;
  metrics.positive_rate =
      metrics.rows > 0 ? positives / static_cast<double>(metrics.rows) : 0;
  metrics.auc = ExactAuc(labels, probabilities);
  metrics.log_loss = LogLoss(labels, probabilities);
  return metrics;
}

// Writes rows [0, rows) of `stream` over `paths` (contiguous, nearly equal
// parts), shows each to `observer` (if any) and measures the model on them.
absl::StatusOr<PlantedMetrics> WriteRows(const SyntheticModel& model,
                                         uint64_t stream, int64_t rows,
                                         const std::vector<std::string>& paths,
                                         const RowObserver& observer) {
  std::vector<float> labels;
  std::vector<double> probabilities;
  labels.reserve(rows);
  probabilities.reserve(rows);
  std::string buffer;
  buffer.reserve(kFlushBytes + 1024);
  SyntheticRow row;
  const int64_t num_files = static_cast<int64_t>(paths.size());
  for (int64_t k = 0; k < num_files; ++k) {
    OutputFile file;
    STRATA_RETURN_IF_ERROR(file.Open(paths[k]));
    const int64_t end = rows * (k + 1) / num_files;
    for (int64_t r = rows * k / num_files; r < end; ++r) {
      model.SampleRow(stream, r, &row);
      const double p = SyntheticModel::Sigmoid(model.Logit(row));
      const bool label = row.label_draw < p;
      if (observer) observer(row, label);
      labels.push_back(label ? 1.0f : 0.0f);
      probabilities.push_back(p);
      AppendCriteoLine(model, row, label, &buffer);
      if (buffer.size() >= kFlushBytes) {
        STRATA_RETURN_IF_ERROR(file.Write(buffer));
        buffer.clear();
      }
    }
    STRATA_RETURN_IF_ERROR(file.Write(buffer));
    buffer.clear();
    STRATA_RETURN_IF_ERROR(file.Close());
  }
  return Measure(labels, probabilities);
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.17g", value);
}

void AppendMetricsJson(const PlantedMetrics& m, std::string* out) {
  absl::StrAppend(out, "{\"rows\": ", m.rows,
                  ", \"positive_rate\": ", JsonNumber(m.positive_rate),
                  ", \"planted_auc\": ", JsonNumber(m.auc),
                  ", \"planted_log_loss\": ", JsonNumber(m.log_loss), "}");
}

void AppendRealisticJson(const DatagenOptions& options,
                         const DatagenResult& result, std::string* out) {
  const RealisticOptions& r = options.realistic;
  const LogitSpread& s = result.spread;
  absl::StrAppend(out, ",\n  \"drift_share\": ", JsonNumber(r.drift_share),
                  ",\n  \"multi_hot_fields\": ", r.multi_hot_fields,
                  ",\n  \"mean_values\": ", JsonNumber(r.mean_values),
                  ",\n  \"logit_stddev\": {\"dense\": ", JsonNumber(s.dense),
                  ", \"first_order\": ", JsonNumber(s.first_order),
                  ", \"entity\": ", JsonNumber(s.entity),
                  ", \"interaction\": ", JsonNumber(s.interaction),
                  ", \"total\": ", JsonNumber(s.total), "}");
  if (result.holdout_file.empty()) return;
  absl::StrAppend(out, ",\n  \"ceilings\": {\"bayes_auc\": ",
                  JsonNumber(result.holdout.auc));
  if (result.has_learnable) {
    absl::StrAppend(
        out, ", \"learnable_auc\": ", JsonNumber(result.learnable.auc),
        ", \"learnable_log_loss\": ", JsonNumber(result.learnable.log_loss),
        ", \"learnable_fit_seconds\": ",
        JsonNumber(result.learnable_fit_seconds),
        "},\n  \"holdout_unseen_value_share\": ",
        JsonNumber(result.holdout_unseen_share));
  } else {
    *out += "}";
  }
}

absl::StatusOr<std::unique_ptr<SyntheticModel>> MakeModel(
    const DatagenOptions& options, LogitSpread* spread) {
  if (options.generator == Generator::kPlanted) {
    STRATA_ASSIGN_OR_RETURN(PlantedModel model,
                            PlantedModel::Create(options.model));
    return std::make_unique<PlantedModel>(std::move(model));
  }
  RealisticOptions realistic = options.realistic;
  realistic.time_rows = options.rows;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RealisticModel> model,
                          RealisticModel::Create(options.model, realistic));
  *spread = model->spread();
  return std::unique_ptr<SyntheticModel>(std::move(model));
}

// Writes the holdout, and measures the learnable-ceiling estimator (if any)
// on it.
absl::Status WriteHoldout(const SyntheticModel& model,
                          const DatagenOptions& options,
                          LearnableCeiling* oracle, DatagenResult* result) {
  result->holdout_file = options.out + ".holdout";
  std::vector<float> labels;
  std::vector<double> predictions;
  int64_t unseen = 0;
  int64_t values = 0;
  RowObserver observer;
  if (oracle != nullptr) {
    const absl::Time start = Clock::Real()->Now();
    oracle->Fit();
    result->learnable_fit_seconds =
        absl::ToDoubleSeconds(Clock::Real()->Now() - start);
    observer = [&](const SyntheticRow& row, bool label) {
      labels.push_back(label ? 1.0f : 0.0f);
      predictions.push_back(SyntheticModel::Sigmoid(oracle->PredictLogit(row)));
      oracle->CountUnseen(row, &unseen, &values);
    };
  }
  STRATA_ASSIGN_OR_RETURN(result->holdout,
                          WriteRows(model, kHoldoutStream, options.holdout_rows,
                                    {result->holdout_file}, observer));
  if (oracle != nullptr) {
    result->has_learnable = true;
    result->learnable = Measure(labels, predictions);
    result->holdout_unseen_share =
        values > 0 ? static_cast<double>(unseen) / values : 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Generator> ParseGenerator(absl::string_view name) {
  if (name == "planted") return Generator::kPlanted;
  if (name == "realistic") return Generator::kRealistic;
  return absl::InvalidArgumentError(
      absl::StrCat("generator '", name, "' is neither planted nor realistic"));
}

const char* GeneratorName(Generator generator) {
  return generator == Generator::kPlanted ? "planted" : "realistic";
}

absl::StatusOr<std::vector<int64_t>> ParseVocabSizes(absl::string_view text) {
  if (text.empty()) return DefaultVocabSizes();
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary size '", part, "' is not a positive integer"));
    }
    sizes.push_back(size);
  }
  PlantedModelOptions check;
  check.vocab_sizes = sizes;
  STRATA_RETURN_IF_ERROR(PlantedModel::ValidateOptions(check));
  return sizes;
}

absl::Status ValidateDatagenOptions(const DatagenOptions& options) {
  if (options.out.empty()) return absl::InvalidArgumentError("no output path");
  if (options.rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows ", options.rows, " is not positive"));
  }
  if (options.holdout_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("holdout_rows ", options.holdout_rows, " is negative"));
  }
  if (options.files < 1 || options.files > kMaxFiles ||
      options.files > options.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("files ", options.files, " is outside 1..",
                     std::min<int64_t>(kMaxFiles, options.rows),
                     " (at most one file per row)"));
  }
  if (options.generator == Generator::kRealistic) {
    return RealisticModel::ValidateOptions(options.model, options.realistic);
  }
  return PlantedModel::ValidateOptions(options.model);
}

std::vector<std::string> DatagenFileNames(const std::string& out, int files) {
  if (files == 1) return {out};
  std::vector<std::string> names;
  for (int k = 0; k < files; ++k) {
    names.push_back(absl::StrFormat("%s-%05d-of-%05d", out, k, files));
  }
  return names;
}

void AppendCriteoLine(const SyntheticModel& model, const SyntheticRow& row,
                      bool label, std::string* out) {
  out->push_back(label ? '1' : '0');
  for (int i = 0; i < kCriteoNumDense; ++i) {
    out->push_back('\t');
    if (row.int_present[i]) AppendInt(row.ints[i], out);
  }
  size_t extra = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    out->push_back('\t');
    if (row.ranks[f] != 0) AppendHex8(model.HexOf(f, row.ranks[f]), out);
    for (int k = 0; k < row.extra_counts[f]; ++k) {
      out->push_back(kCriteoValueSeparator);
      AppendHex8(model.HexOf(f, row.extra_ranks[extra++]), out);
    }
  }
  out->push_back('\n');
}

std::string DatagenMetaJson(const DatagenOptions& options,
                            const DatagenResult& result) {
  const PlantedModelOptions& m = options.model;
  std::string json =
      absl::StrCat("{\n  \"format\": \"criteo\",\n  \"generator\": \"",
                   GeneratorName(options.generator), "\",\n  \"files\": [");
  for (size_t k = 0; k < result.files.size(); ++k) {
    absl::StrAppend(&json, k == 0 ? "" : ", ", JsonString(result.files[k]));
  }
  absl::StrAppend(
      &json, "],\n  \"holdout_file\": ",
      result.holdout_file.empty() ? "null" : JsonString(result.holdout_file),
      ",\n  \"seed\": ", m.seed, ",\n  \"zipf_s\": ", JsonNumber(m.zipf_s),
      ",\n  \"target_ctr\": ", JsonNumber(m.target_ctr),
      ",\n  \"tail_rank\": ", JsonNumber(m.tail_rank),
      ",\n  \"first_order_scale\": ", JsonNumber(m.first_order_scale),
      ",\n  \"interaction_scale\": ", JsonNumber(m.interaction_scale),
      ",\n  \"vocab_sizes\": [");
  std::vector<int64_t> sizes = m.vocab_sizes;
  if (sizes.empty()) {
    sizes = options.generator == Generator::kPlanted
                ? DefaultVocabSizes()
                : RealisticModel::DefaultVocabSizes();
  }
  for (size_t f = 0; f < sizes.size(); ++f) {
    absl::StrAppend(&json, f == 0 ? "" : ", ", sizes[f]);
  }
  absl::StrAppend(&json, "],\n  \"bias\": ", JsonNumber(result.bias),
                  ",\n  \"train\": ");
  AppendMetricsJson(result.train, &json);
  absl::StrAppend(&json, ",\n  \"holdout\": ");
  if (result.holdout_file.empty()) {
    json += "null";
  } else {
    AppendMetricsJson(result.holdout, &json);
  }
  if (options.generator == Generator::kRealistic) {
    AppendRealisticJson(options, result, &json);
  }
  json += "\n}\n";
  return json;
}

absl::StatusOr<DatagenResult> GenerateData(const DatagenOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateDatagenOptions(options));
  DatagenResult result;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SyntheticModel> model,
                          MakeModel(options, &result.spread));
  result.bias = model->bias();
  result.files = DatagenFileNames(options.out, options.files);
  std::unique_ptr<LearnableCeiling> oracle;
  RowObserver observer;
  if (options.generator == Generator::kRealistic && options.learnable_ceiling &&
      options.holdout_rows > 0) {
    oracle = std::make_unique<LearnableCeiling>(
        static_cast<const RealisticModel&>(*model));
    observer = [&oracle](const SyntheticRow& row, bool label) {
      oracle->AddTrainingRow(row, label);
    };
  }
  STRATA_ASSIGN_OR_RETURN(
      result.train,
      WriteRows(*model, kTrainStream, options.rows, result.files, observer));
  if (options.holdout_rows > 0) {
    STRATA_RETURN_IF_ERROR(
        WriteHoldout(*model, options, oracle.get(), &result));
  }
  result.meta_file = options.out + ".meta.json";
  OutputFile meta;
  STRATA_RETURN_IF_ERROR(meta.Open(result.meta_file));
  STRATA_RETURN_IF_ERROR(meta.Write(DatagenMetaJson(options, result)));
  STRATA_RETURN_IF_ERROR(meta.Close());
  return result;
}

}  // namespace strata
