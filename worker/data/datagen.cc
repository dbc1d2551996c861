#include "worker/data/datagen.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
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

// Writes rows [0, rows) of `stream` over `paths` (contiguous, nearly equal
// parts) and measures the planted model on them.
absl::StatusOr<PlantedMetrics> WriteRows(
    const PlantedModel& model, uint64_t stream, int64_t rows,
    const std::vector<std::string>& paths) {
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
      const double p = PlantedModel::Sigmoid(model.Logit(row));
      const bool label = row.label_draw < p;
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
  PlantedMetrics metrics;
  metrics.rows = rows;
  double positives = 0;
  for (float y : labels) positives += y;
  metrics.positive_rate = rows > 0 ? positives / rows : 0;
  metrics.auc = ExactAuc(labels, probabilities);
  metrics.log_loss = LogLoss(labels, probabilities);
  return metrics;
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

}  // namespace

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

void AppendCriteoLine(const PlantedModel& model, const SyntheticRow& row,
                      bool label, std::string* out) {
  out->push_back(label ? '1' : '0');
  for (int i = 0; i < kCriteoNumDense; ++i) {
    out->push_back('\t');
    if (row.int_present[i]) AppendInt(row.ints[i], out);
  }
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    out->push_back('\t');
    if (row.ranks[f] != 0) AppendHex8(model.HexOf(f, row.ranks[f]), out);
  }
  out->push_back('\n');
}

std::string DatagenMetaJson(const DatagenOptions& options,
                            const DatagenResult& result) {
  const PlantedModelOptions& m = options.model;
  std::string json = "{\n  \"format\": \"criteo\",\n  \"files\": [";
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
  const std::vector<int64_t> sizes =
      m.vocab_sizes.empty() ? DefaultVocabSizes() : m.vocab_sizes;
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
  json += "\n}\n";
  return json;
}

absl::StatusOr<DatagenResult> GenerateData(const DatagenOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateDatagenOptions(options));
  STRATA_ASSIGN_OR_RETURN(PlantedModel model,
                          PlantedModel::Create(options.model));
  DatagenResult result;
  result.bias = model.bias();
  result.files = DatagenFileNames(options.out, options.files);
  STRATA_ASSIGN_OR_RETURN(
      result.train, WriteRows(model, kTrainStream, options.rows, result.files));
  if (options.holdout_rows > 0) {
    result.holdout_file = options.out + ".holdout";
    STRATA_ASSIGN_OR_RETURN(
        result.holdout, WriteRows(model, kHoldoutStream, options.holdout_rows,
                                  {result.holdout_file}));
  }
  result.meta_file = options.out + ".meta.json";
  OutputFile meta;
  STRATA_RETURN_IF_ERROR(meta.Open(result.meta_file));
  STRATA_RETURN_IF_ERROR(meta.Write(DatagenMetaJson(options, result)));
  STRATA_RETURN_IF_ERROR(meta.Close());
  return result;
}

}  // namespace strata
