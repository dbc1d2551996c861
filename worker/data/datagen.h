#ifndef STRATA_WORKER_DATA_DATAGEN_H_
#define STRATA_WORKER_DATA_DATAGEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/planted_model.h"
#include "worker/data/realistic_model.h"

namespace strata {

// planted: PlantedModel (a DLRM-shaped truth, signal in dense pairwise
// interactions). realistic: RealisticModel (single-feature effects dominant,
// users and ads, drift, optional multi-hot fields).
enum class Generator { kPlanted, kRealistic };

struct DatagenOptions {
  Generator generator = Generator::kPlanted;
  PlantedModelOptions model;
  // Realistic only; time_rows is set to `rows`.
  RealisticOptions realistic;
  // Realistic only, with holdout rows: fit the learnable-ceiling estimator
  // (LearnableCeiling) on the training rows and measure it on the holdout.
  bool learnable_ceiling = true;
  // Training rows, split over `files` files in order.
  int64_t rows = 1000000;
  // Rows of a separate held-out file (its own random stream: the same for any
  // --rows); 0 writes none.
  int64_t holdout_rows = 0;
  // Output path. One file: `out` itself; several: out-00000-of-00004 and so
  // on. The holdout goes to <out>.holdout and the summary to
  // <out>.meta.json.
  std::string out;
  int files = 1;
};

// The planted model measured on the rows it labelled: the ceiling a trained
// model can approach on the same data.
struct PlantedMetrics {
  int64_t rows = 0;
  double positive_rate = 0;
  double auc = 0;       // exact (ties count 1/2); NaN if one class only
  double log_loss = 0;  // of the planted probabilities
};

struct DatagenResult {
  std::vector<std::string> files;
  std::string holdout_file;  // empty without holdout rows
  std::string meta_file;
  double bias = 0;
  PlantedMetrics train;
  PlantedMetrics holdout;  // its AUC is the Bayes ceiling
  // Realistic only.
  LogitSpread spread;
  bool has_learnable = false;
  PlantedMetrics learnable;  // the learnable-ceiling estimator on the holdout
  double learnable_fit_seconds = 0;
  // Share of the holdout's categorical values (multi-hot ones each) that no
  // training row has.
  double holdout_unseen_share = 0;
};

absl::StatusOr<Generator> ParseGenerator(absl::string_view name);
const char* GeneratorName(Generator generator);

// Parses "10,20,..." (26 positive integers); empty text gives the default.
absl::StatusOr<std::vector<int64_t>> ParseVocabSizes(absl::string_view text);

// Checks `options` without writing anything: INVALID_ARGUMENT naming the
// problem.
absl::Status ValidateDatagenOptions(const DatagenOptions& options);

// The names GenerateData writes the training rows to.
std::vector<std::string> DatagenFileNames(const std::string& out, int files);

// Writes the data set and its <out>.meta.json. The bytes depend only on the
// options (not on timing or the machine). INVALID_ARGUMENT for bad options;
// a file error (NOT_FOUND, PERMISSION_DENIED, INTERNAL) names the file.
//
//   DatagenOptions options;
//   options.out = "/tmp/criteo";
//   STRATA_ASSIGN_OR_RETURN(DatagenResult result, GenerateData(options));
absl::StatusOr<DatagenResult> GenerateData(const DatagenOptions& options);

// Appends one row as a Criteo line (40 fields, '\n'-terminated).
void AppendCriteoLine(const SyntheticModel& model, const SyntheticRow& row,
                      bool label, std::string* out);

// The JSON of <out>.meta.json.
std::string DatagenMetaJson(const DatagenOptions& options,
                            const DatagenResult& result);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_DATAGEN_H_
