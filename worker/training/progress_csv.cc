#include "worker/training/progress_csv.h"

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata {

absl::StatusOr<std::unique_ptr<ProgressCsv>> ProgressCsv::Open(
    const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot open --progress_file ", path, ": ", std::strerror(errno)));
  }
  // A new (empty) file gets the header; a restored run's file has it.
  if (std::fseek(file, 0, SEEK_END) == 0 && std::ftell(file) == 0) {
    std::fprintf(file, "%s\n", kHeader);
    std::fflush(file);
  }
  return std::unique_ptr<ProgressCsv>(new ProgressCsv(file));
}

ProgressCsv::~ProgressCsv() { std::fclose(file_); }

void ProgressCsv::Append(int64_t step, int epoch, int64_t examples,
                         double seconds, double samples_per_second, double loss,
                         bool has_eval, double eval_auc, double eval_log_loss) {
  std::string line =
      absl::StrFormat("%d,%d,%d,%.3f,%.1f,%.6f,", step, epoch, examples,
                      seconds, samples_per_second, loss);
  if (has_eval) {
    absl::StrAppendFormat(&line, "%.6f,%.6f", eval_auc, eval_log_loss);
  } else {
    line += ",";
  }
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

}  // namespace strata
