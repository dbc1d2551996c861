#include "tests/testing/training_data.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_system.h"

namespace strata {
namespace testing {

absl::StatusOr<DatagenResult> GenerateLearnableData(const std::string& dir,
                                                    int64_t rows,
                                                    int64_t holdout_rows) {
  DatagenOptions data;
  data.rows = rows;
  data.holdout_rows = holdout_rows;
  data.out = absl::StrCat(dir, "/train");
  // Ten values per field: few enough parameters that a model comes near the
  // planted ceiling from a few hundred thousand rows (the quickstart's 3M
  // rows come within 0.01; see bench/RESULTS.md).
  data.model.vocab_sizes = std::vector<int64_t>(26, 10);
  data.model.tail_rank = 30;
  return GenerateData(data);
}

std::vector<std::string> LearnableDataWorkerFlags(
    const DatagenResult& data, const std::string& shards, int rank,
    int num_workers, const std::string& job_id,
    const std::string& result_file) {
  return {
      absl::StrCat("--shards=", shards),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--num_workers=", num_workers),
      absl::StrCat("--job_id=", job_id),
      absl::StrCat("--train_files=", data.files[0]),
      absl::StrCat("--eval_files=", data.holdout_file),
      "--batch_size=256",
      // One pass in file order without the wide term: what these tests'
      // figures were set for (not the worker's defaults).
      "--epochs=1",
      "--shuffle_buffer=0",
      "--wide=false",
      "--staleness=0",
      "--sparse_optimizer=adam",
      "--sparse_learning_rate=0.01",
      "--dense_learning_rate=0.001",
      "--progress_interval_s=0.5",
      "--collective_timeout_s=120",
      absl::StrCat("--result_file=", result_file),
  };
}

double ResultNumber(const std::string& path, const std::string& name) {
  absl::StatusOr<std::string> json = FileSystem::Default()->ReadFile(path);
  if (!json.ok()) return NAN;
  const std::string key = absl::StrCat("\"", name, "\": ");
  const size_t at = json->find(key);
  if (at == std::string::npos) return NAN;
  const size_t end = json->find_first_of(",}", at);
  double value = NAN;
  if (!absl::SimpleAtod(json->substr(at + key.size(), end - at - key.size()),
                        &value)) {
    return NAN;
  }
  return value;
}

}  // namespace testing
}  // namespace strata
