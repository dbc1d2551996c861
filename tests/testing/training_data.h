#ifndef STRATA_TESTS_TESTING_TRAINING_DATA_H_
#define STRATA_TESTS_TESTING_TRAINING_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/datagen.h"

namespace strata {
namespace testing {

// Planted click data in `dir`/train that a model learns from few rows: ten
// values per categorical field, tail rank 30 (the quickstart's shape).
absl::StatusOr<DatagenResult> GenerateLearnableData(const std::string& dir,
                                                    int64_t rows,
                                                    int64_t holdout_rows);

// The strata-worker flags that train rank `rank` of `num_workers` on
// GenerateLearnableData's rows against `shards` (--shards's text) with the
// settings that learn them in one epoch: batch 256, no staleness, Adam 0.01
// on the PS and 0.001 for the dense part. The result goes to `result_file`.
std::vector<std::string> LearnableDataWorkerFlags(
    const DatagenResult& data, const std::string& shards, int rank,
    int num_workers, const std::string& job_id, const std::string& result_file);

// A number field of a worker's flat --result_file JSON at `path`; NaN when
// the file or the field is missing.
double ResultNumber(const std::string& path, const std::string& name);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_TRAINING_DATA_H_
