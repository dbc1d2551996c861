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
ABSL_FLAG(std::string, generator, "planted",
          "planted: a DLRM-shaped truth (dense pairwise interactions of every "
          "field). realistic: single-feature effects dominant, users and ads "
          "behind correlated fields, four sparse interactions, drift, "
          "optional multi-hot fields, and a learnable ceiling next to the "
          "Bayes ceiling (docs/DATA.md).");
ABSL_FLAG(std::string, vocab_sizes, "",
          "26 comma-separated vocabulary sizes of C1..C26; default (planted) "
          "grows geometrically from 10 to 2000000; (realistic) 2100000 user "
          "ids, 500000 ad ids and 10 to 1500000 for the others, 5.02M in all.");
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
ABSL_FLAG(double, drift_share, 0.2,
          "realistic: share of rows whose user (and, drawn apart, ad) is a new "
          "id that arrived shortly before the row; in [0, 1).");
ABSL_FLAG(int, multi_hot_fields, 0,
          "realistic: the last N context fields (C26 down to C23) hold "
          "several values, ','-separated; 0..4.");
ABSL_FLAG(double, mean_values, 4,
          "realistic: mean number of values of a multi-hot field, in [1, 16].");
ABSL_FLAG(bool, learnable_ceiling, true,
          "realistic, with --holdout_rows: fit an estimator that knows the "
          "generator's form on the training rows and report its holdout AUC "
          "(the learnable ceiling); keeps the training rows in memory (about "
          "170 bytes each).");

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
  options.realistic.drift_share = absl::GetFlag(FLAGS_drift_share);
  options.realistic.multi_hot_fields = absl::GetFlag(FLAGS_multi_hot_fields);
  options.realistic.mean_values = absl::GetFlag(FLAGS_mean_values);
  options.learnable_ceiling = absl::GetFlag(FLAGS_learnable_ceiling);
  if (options.out.empty()) return UsageError("--out is required");
  absl::StatusOr<Generator> generator =
      ParseGenerator(absl::GetFlag(FLAGS_generator));
  if (!generator.ok()) {
    return UsageError(
        absl::StrCat("--generator: ", generator.status().message()));
  }
  options.generator = *generator;
  const std::string vocab_text = absl::GetFlag(FLAGS_vocab_sizes);
  if (!vocab_text.empty()) {
    absl::StatusOr<std::vector<int64_t>> sizes = ParseVocabSizes(vocab_text);
    if (!sizes.ok()) {
      return UsageError(
          absl::StrCat("--vocab_sizes: ", sizes.status().message()));
    }
    options.model.vocab_sizes = *sizes;
  }
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
  if (result->has_learnable) {
    std::printf(
        "ceilings on the holdout: Bayes AUC %.6f, learnable AUC %.6f (log "
        "loss %.6f; fitted in %.1f s); %.1f%% of its values never appear in "
        "training\n",
        result->holdout.auc, result->learnable.auc, result->learnable.log_loss,
        result->learnable_fit_seconds, 100 * result->holdout_unseen_share);
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
