#ifndef STRATA_WORKER_TRAINING_PROGRESS_CSV_H_
#define STRATA_WORKER_TRAINING_PROGRESS_CSV_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

// strata-worker's --progress_file: one CSV line per progress report (and
// evaluation), for plotting (`stratactl plot`) and spreadsheets:
//   step,epoch,examples,seconds,samples_per_second,loss,eval_auc,eval_log_loss
// `seconds` counts from the start of this run; the eval columns are empty
// when no evaluation ran at that report. A run restored from a checkpoint
// appends to the file of the run before (the header is written once).
// Each line is flushed as it is written. Not thread-safe.
class ProgressCsv {
 public:
  static constexpr char kHeader[] =
      "step,epoch,examples,seconds,samples_per_second,loss,eval_auc,"
      "eval_log_loss";

  // NOT_FOUND / PERMISSION_DENIED-like errors name the path.
  static absl::StatusOr<std::unique_ptr<ProgressCsv>> Open(
      const std::string& path);
  ~ProgressCsv();
  ProgressCsv(const ProgressCsv&) = delete;
  ProgressCsv& operator=(const ProgressCsv&) = delete;

  // `has_eval` false leaves the eval columns empty.
  void Append(int64_t step, int epoch, int64_t examples, double seconds,
              double samples_per_second, double loss, bool has_eval,
              double eval_auc, double eval_log_loss);

 private:
  explicit ProgressCsv(std::FILE* file) : file_(file) {}
  std::FILE* file_;
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_PROGRESS_CSV_H_
