#ifndef STRATA_TESTS_TESTING_TRAINING_DATA_H_
#define STRATA_TESTS_TESTING_TRAINING_DATA_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/datagen.h"

namespace strata {
namespace testing {

// Planted click data in `dir`/train that a model learns from few rows: ten
// values per categorical field, tail rank 30 (the quickstart's shape).
absl::StatusOr<DatagenResult> GenerateLearnableData(const std::string& dir,
                                                    int64_t rows,
                                                    int64_t holdout_rows);

// A number field of a worker's flat --result_file JSON at `path`; NaN when
// the file or the field is missing.
double ResultNumber(const std::string& path, const std::string& name);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_TRAINING_DATA_H_
