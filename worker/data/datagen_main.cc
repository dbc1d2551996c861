// strata-datagen: writes synthetic Criteo-format data whose labels come from a
// planted model, and reports that model's AUC and log loss on it.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "worker/data/datagen.h"

ABSL_FLAG(int64_t, rows, 1000000, "Training rows to write.");
ABSL_FLAG(int64_t, holdout_rows, 0,
          "Rows of a separate held-out file, <out>.holdout, drawn from their "
          "own stream (the same rows for any --rows); 0 writes none.");
ABSL_FLAG(std::string, out, "",
          "Output path (required). With --files=1 the training rows go to it; "
          "with more to <out>-00000-of-0000N and so on. The summary goes to "
          "<out>.meta.json.");
ABSL_FLAG(int, files, 1, "Number of training files, each a contiguous part.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of everything: the same flags write the same bytes.");
ABSL_FLAG(std::string, vocab_sizes, "",
          "26 comma-separated vocabulary sizes of C1..C26; default grows "
          "geometrically from 10 to 2000000.");
ABSL_FLAG(double, zipf_s, 1.1,
          "Zipf exponent of every field's values, in (1, 3]; real click logs "
          "are near 1.05..1.2.");
ABSL_FLAG(double, ctr, 0.25, "Target base click rate (mean probability).");
ABSL_FLAG(double, tail_rank, 1000,
          "Planted effects of a value of frequency rank r are scaled by "
          "tail_rank / (tail_rank + r): smaller puts more of the signal in "
          "frequent values, which a model can learn from fewer rows.");

ABSL_FLAG(double, first_order_scale, 1.0,
          "Scale of the planted single-feature (first-order) effects.");
ABSL_FLAG(double, interaction_scale, 1.0,
          "Scale of the planted pairwise interactions; 0: first-order signal "
          "only (what a logistic regression can learn).");

namespace strata {
namespace {

constexpr int kExitRuntimeError = 1;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-datagen: %s (see --help)\n", message.c_str());
  return kUsageExitCode;
}

void PrintMetrics(const char* name, const std::string& where,
                  const PlantedMetrics& m) {
  std::printf(
      "%s: %lld rows in %s, positive rate %.4f, planted AUC %.6f, planted "
      "log loss %.6f\n",
      name, static_cast<long long>(m.rows), where.c_str(), m.positive_rate,
      m.auc, m.log_loss);
}

int Run() {
  DatagenOptions options;
  options.rows = absl::GetFlag(FLAGS_rows);
  options.holdout_rows = absl::GetFlag(FLAGS_holdout_rows);
  options.out = absl::GetFlag(FLAGS_out);
  options.files = absl::GetFlag(FLAGS_files);
  options.model.seed = absl::GetFlag(FLAGS_seed);
  options.model.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  options.model.target_ctr = absl::GetFlag(FLAGS_ctr);
  options.model.tail_rank = absl::GetFlag(FLAGS_tail_rank);
  options.model.first_order_scale = absl::GetFlag(FLAGS_first_order_scale);
  options.model.interaction_scale = absl::GetFlag(FLAGS_interaction_scale);
  if (options.out.empty()) return UsageError("--out is required");
  absl::StatusOr<std::vector<int64_t>> sizes =
      ParseVocabSizes(absl::GetFlag(FLAGS_vocab_sizes));
  if (!sizes.ok()) {
    return UsageError(
        absl::StrCat("--vocab_sizes: ", sizes.status().message()));
  }
  options.model.vocab_sizes = *sizes;
  const absl::Status valid = ValidateDatagenOptions(options);
  if (!valid.ok()) return UsageError(std::string(valid.message()));

  const absl::Time start = Clock::Real()->Now();
  absl::StatusOr<DatagenResult> result = GenerateData(options);
  if (!result.ok()) {
    std::fprintf(stderr, "strata-datagen: %s\n",
                 result.status().ToString().c_str());
    return kExitRuntimeError;
  }
  const double seconds = absl::ToDoubleSeconds(Clock::Real()->Now() - start);
  const std::string where =
      options.files == 1
          ? options.out
          : absl::StrFormat("%d files %s-*", options.files, options.out);
  PrintMetrics("train", where, result->train);
  if (!result->holdout_file.empty()) {
    PrintMetrics("holdout", result->holdout_file, result->holdout);
  }
  const int64_t total = options.rows + options.holdout_rows;
  std::printf("wrote %s in %.2f s (%.0f rows/s)\n", result->meta_file.c_str(),
              seconds, total / seconds);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::ParseCommandLine(
      "strata-datagen --out=PATH [--rows=N] [--holdout_rows=N] [--seed=S]\n"
      "Writes synthetic Criteo-format data (label, I1..I13, C1..C26) with\n"
      "labels from a planted model, and prints that model's AUC and log loss\n"
      "on the rows written: the ceiling a trained model can approach.",
      argc, argv);
  return strata::Run();
}
