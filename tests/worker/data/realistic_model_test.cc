#include "worker/data/realistic_model.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/worker/data/test_files.h"
#include "worker/data/criteo_format.h"
#include "worker/data/datagen.h"
#include "worker/data/learnable_ceiling.h"
#include "worker/data/metrics.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ReadTextFile;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

// Small vocabularies, so that a few thousand rows repeat values.
std::vector<int64_t> SmallVocabularies() {
  std::vector<int64_t> sizes = RealisticModel::DefaultVocabSizes();
  for (int64_t& size : sizes) size = std::max<int64_t>(2, size / 100);
  return sizes;
}

DatagenOptions RealisticOptionsFor(const std::string& out) {
  DatagenOptions options;
  options.generator = Generator::kRealistic;
  options.out = out;
  options.rows = 30000;
  options.holdout_rows = 8000;
  options.model.vocab_sizes = SmallVocabularies();
  return options;
}

std::unique_ptr<RealisticModel> Model(const DatagenOptions& options) {
  RealisticOptions realistic = options.realistic;
  realistic.time_rows = options.rows;
  absl::StatusOr<std::unique_ptr<RealisticModel>> model =
      RealisticModel::Create(options.model, realistic);
  EXPECT_THAT(model.status(), IsOk());
  return std::move(*model);
}

TEST(RealisticModelTest, FilesParseAndTheirLogitsGiveTheReportedBayesAuc) {
  const TempDir temp_dir("realistic_model");
  const std::string& dir = temp_dir.path();
  DatagenOptions options = RealisticOptionsFor(dir + "/r");
  options.realistic.multi_hot_fields = 2;
  options.learnable_ceiling = false;
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult result, GenerateData(options));
  const std::unique_ptr<RealisticModel> model = Model(options);
  std::istringstream in(ReadTextFile(result.holdout_file));
  std::string line;
  std::vector<float> labels;
  std::vector<double> probabilities;
  int64_t multi_hot_values[kCriteoNumCategorical] = {};
  CriteoExample example;
  while (std::getline(in, line)) {
    ASSERT_THAT(ParseCriteoLine(line, &example, nullptr), IsOk()) << line;
    for (int f = 0; f < kCriteoNumCategorical; ++f) {
      multi_hot_values[f] += example.ends[f] - example.begin(f) - 1;
    }
    STRATA_ASSERT_OK_AND_ASSIGN(SyntheticModel::LabeledLogit l,
                                model->LogitOfLine(line));
    labels.push_back(l.label);
    probabilities.push_back(SyntheticModel::Sigmoid(l.logit));
  }
  ASSERT_EQ(static_cast<int64_t>(labels.size()), options.holdout_rows);
  EXPECT_NEAR(ExactAuc(labels, probabilities), result.holdout.auc, 1e-9);
  EXPECT_GT(result.holdout.auc, 0.72);
  // Only C25 and C26 hold several values: about mean_values - 1 extra each.
  for (int f = 0; f < kCriteoNumCategorical - 2; ++f) {
    EXPECT_EQ(multi_hot_values[f], 0) << "C" << f + 1;
  }
  for (int f = kCriteoNumCategorical - 2; f < kCriteoNumCategorical; ++f) {
    const double extra = static_cast<double>(multi_hot_values[f]) /
                         static_cast<double>(options.holdout_rows);
    EXPECT_GT(extra, 2.0) << "C" << f + 1;
    EXPECT_LT(extra, 4.0) << "C" << f + 1;
  }
  const std::string meta = ReadTextFile(result.meta_file);
  EXPECT_THAT(meta, HasSubstr("\"generator\": \"realistic\""));
  EXPECT_THAT(meta, HasSubstr("\"bayes_auc\": "));
}

TEST(RealisticModelTest, SingleFeatureEffectsCarryMostOfTheLogitsVariance) {
  const std::unique_ptr<RealisticModel> model =
      Model(RealisticOptionsFor("unused"));
  const LogitSpread& s = model->spread();
  const double single = s.first_order * s.first_order + s.entity * s.entity;
  EXPECT_GT(single, 2 * s.interaction * s.interaction);
  EXPECT_GT(s.interaction, 0.1);
  EXPECT_GT(s.entity, 0.1);
}

TEST(RealisticModelTest, AUsersAttributesFollowTheUserAcrossRows) {
  const std::unique_ptr<RealisticModel> model =
      Model(RealisticOptionsFor("unused"));
  // For the most frequent users, how often each row repeats the user's most
  // common C3 (an attribute) and C22 (context: independent of the user).
  absl::flat_hash_map<uint32_t, absl::flat_hash_map<uint32_t, int>> attribute;
  absl::flat_hash_map<uint32_t, absl::flat_hash_map<uint32_t, int>> context;
  SyntheticRow row;
  for (int r = 0; r < 20000; ++r) {
    model->SampleRow(0, r, &row);
    const uint32_t user = row.ranks[RealisticModel::kUserId];
    ++attribute[user][row.ranks[2]];
    ++context[user][row.ranks[21]];
  }
  auto agreement = [](const auto& by_user) {
    int64_t top = 0;
    int64_t all = 0;
    for (const auto& [user, values] : by_user) {
      int rows = 0;
      int most = 0;
      for (const auto& [value, count] : values) {
        rows += count;
        most = std::max(most, count);
      }
      if (rows < 20) continue;
      top += most;
      all += rows;
    }
    return static_cast<double>(top) / static_cast<double>(all);
  };
  EXPECT_GT(agreement(attribute), 0.85);
  EXPECT_LT(agreement(context), 0.6);
}

TEST(RealisticModelTest, DriftBringsIdsTheTrainingRowsNeverSaw) {
  auto unseen_share = [](double drift) {
    DatagenOptions options = RealisticOptionsFor("unused");
    options.realistic.drift_share = drift;
    const std::unique_ptr<RealisticModel> model = Model(options);
    LearnableCeiling seen(*model);
    SyntheticRow row;
    for (int r = 0; r < options.rows; ++r) {
      model->SampleRow(0, r, &row);
      seen.AddTrainingRow(row, false);
    }
    int64_t unseen_users = 0;
    for (int r = 0; r < 5000; ++r) {
      model->SampleRow(1, r, &row);
      unseen_users += !seen.Seen(RealisticModel::kUserId,
                                 row.ranks[RealisticModel::kUserId]);
    }
    return static_cast<double>(unseen_users) / 5000;
  };
  const double none = unseen_share(0);
  const double some = unseen_share(0.3);
  EXPECT_LT(none, 0.25);
  EXPECT_GT(some, none + 0.15);
}

TEST(RealisticModelTest, LearnableCeilingIsBelowBayesAndRisesWithRows) {
  const TempDir temp_dir("realistic_model");
  const std::string& dir = temp_dir.path();
  DatagenOptions small = RealisticOptionsFor(dir + "/small");
  small.rows = 4000;
  DatagenOptions large = RealisticOptionsFor(dir + "/large");
  large.rows = 60000;
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult few, GenerateData(small));
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult many, GenerateData(large));
  ASSERT_TRUE(few.has_learnable);
  ASSERT_TRUE(many.has_learnable);
  EXPECT_LT(many.learnable.auc, many.holdout.auc);
  EXPECT_GT(many.learnable.auc, many.holdout.auc - 0.05);
  EXPECT_GT(many.learnable.auc, few.learnable.auc + 0.01);
  EXPECT_GT(few.holdout_unseen_share, many.holdout_unseen_share);
  const std::string meta = ReadTextFile(many.meta_file);
  EXPECT_THAT(meta, HasSubstr(absl::StrCat("\"learnable_auc\": ")));
  EXPECT_THAT(meta, HasSubstr("\"holdout_unseen_value_share\": "));
}

TEST(RealisticModelTest, BadOptionsAreRejectedByName) {
  DatagenOptions options = RealisticOptionsFor("/tmp/unused");
  EXPECT_THAT(ValidateDatagenOptions(options), IsOk());
  options.realistic.drift_share = 1;
  EXPECT_THAT(
      ValidateDatagenOptions(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("drift_share 1")));
  options = RealisticOptionsFor("/tmp/unused");
  options.realistic.multi_hot_fields = 5;
  EXPECT_THAT(ValidateDatagenOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("multi_hot_fields 5")));
  options = RealisticOptionsFor("/tmp/unused");
  options.realistic.mean_values = 0.5;
  EXPECT_THAT(ValidateDatagenOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mean_values 0.5")));
  EXPECT_THAT(
      ParseGenerator("dlrm"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'dlrm'")));
  STRATA_ASSERT_OK_AND_ASSIGN(Generator g, ParseGenerator("realistic"));
  EXPECT_EQ(g, Generator::kRealistic);
}

}  // namespace
}  // namespace strata
