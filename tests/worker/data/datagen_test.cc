#include "worker/data/datagen.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/worker/data/test_files.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/metrics.h"
#include "worker/data/planted_model.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ReadTextFile;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

DatagenOptions SmallOptions(const std::string& out) {
  DatagenOptions options;
  options.out = out;
  options.rows = 20000;
  options.holdout_rows = 3000;
  return options;
}

// The number after "<key>": in the object after "<section>": of a meta file.
double MetaNumber(const std::string& json, const std::string& section,
                  const std::string& key) {
  const size_t at = json.find(absl::StrCat("\"", section, "\": {"));
  EXPECT_NE(at, std::string::npos) << section;
  const size_t k = json.find(absl::StrCat("\"", key, "\": "), at);
  EXPECT_NE(k, std::string::npos) << key;
  return std::strtod(json.c_str() + k + key.size() + 4, nullptr);
}

TEST(DatagenTest, SameSeedWritesSameBytesAndOtherSeedsDiffer) {
  const TempDir temp_dir("datagen");
  const std::string& dir = temp_dir.path();
  DatagenOptions options = SmallOptions(dir + "/a");
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult a, GenerateData(options));
  options.out = dir + "/b";
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult b, GenerateData(options));
  options.out = dir + "/c";
  options.model.seed = 2;
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult c, GenerateData(options));
  const std::string text_a = ReadTextFile(dir + "/a");
  EXPECT_EQ(text_a, ReadTextFile(dir + "/b"));
  EXPECT_EQ(ReadTextFile(dir + "/a.holdout"), ReadTextFile(dir + "/b.holdout"));
  EXPECT_EQ(a.train.auc, b.train.auc);
  EXPECT_NE(text_a, ReadTextFile(dir + "/c"));
  EXPECT_NE(a.train.auc, c.train.auc);
}

TEST(DatagenTest, RowsDoNotDependOnFileSplitAndHoldoutNotOnRows) {
  const TempDir temp_dir("datagen");
  const std::string& dir = temp_dir.path();
  DatagenOptions options = SmallOptions(dir + "/one");
  ASSERT_THAT(GenerateData(options).status(), IsOk());
  options.out = dir + "/three";
  options.files = 3;
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult three, GenerateData(options));
  ASSERT_EQ(three.files.size(), 3u);
  EXPECT_EQ(three.files[1], dir + "/three-00001-of-00003");
  std::string joined;
  for (const std::string& file : three.files) joined += ReadTextFile(file);
  EXPECT_EQ(joined, ReadTextFile(dir + "/one"));
  options.out = dir + "/more";
  options.files = 1;
  options.rows = 30000;
  ASSERT_THAT(GenerateData(options).status(), IsOk());
  EXPECT_EQ(ReadTextFile(dir + "/more.holdout"),
            ReadTextFile(dir + "/one.holdout"));
}

TEST(DatagenTest, OutputParsesWithoutMalformedLinesAndHasAPlausibleRate) {
  const TempDir temp_dir("datagen");
  const std::string& dir = temp_dir.path();
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult result,
                              GenerateData(SmallOptions(dir + "/d")));
  CriteoReaderOptions options;
  options.files = result.files;
  options.strict = true;
  STRATA_ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  Batch batch;
  double positives = 0;
  int64_t empty_categoricals = 0;
  while (true) {
    ASSERT_THAT(reader->ReadBatch(&batch), IsOk());
    if (batch.size() == 0) break;
    for (float y : batch.labels) positives += y;
    for (size_t i = 0; i < batch.size(); ++i) {
      for (int f = 0; f < kCriteoNumCategorical; ++f) {
        empty_categoricals +=
            batch.keys[i * kCriteoNumCategorical + f] == CriteoMissingKey(f);
      }
    }
  }
  EXPECT_EQ(reader->stats().examples, 20000);
  EXPECT_EQ(reader->stats().malformed, 0);
  EXPECT_GT(empty_categoricals, 0);
  const double rate = positives / 20000;
  EXPECT_GT(rate, 0.2);
  EXPECT_LT(rate, 0.3);
  EXPECT_EQ(rate, result.train.positive_rate);
  // The text has empty and negative integers, as the real data does.
  const std::string text = ReadTextFile(result.files[0]);
  EXPECT_NE(text.find("\t\t"), std::string::npos);
  EXPECT_NE(text.find("\t-"), std::string::npos);
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(text.substr(0, 100000), '\n'))) {
    if (line.empty() || line.size() > 5000) continue;
    EXPECT_LE(std::count(line.begin(), line.end(), '\t'), 39);
  }
}

TEST(DatagenTest, PlantedMetricsRecomputedFromTheFilesMatchTheMetadata) {
  const TempDir temp_dir("datagen");
  const std::string& dir = temp_dir.path();
  DatagenOptions options = SmallOptions(dir + "/m");
  options.files = 2;
  STRATA_ASSERT_OK_AND_ASSIGN(DatagenResult result, GenerateData(options));
  STRATA_ASSERT_OK_AND_ASSIGN(PlantedModel model,
                              PlantedModel::Create(options.model));
  const std::string meta = ReadTextFile(result.meta_file);
  const std::pair<std::string, std::vector<std::string>> sets[] = {
      {"train", result.files}, {"holdout", {result.holdout_file}}};
  for (const auto& [name, files] : sets) {
    std::vector<float> labels;
    std::vector<double> probabilities;
    for (const std::string& file : files) {
      std::istringstream in(ReadTextFile(file));
      std::string line;
      while (std::getline(in, line)) {
        STRATA_ASSERT_OK_AND_ASSIGN(PlantedModel::LabeledLogit l,
                                    model.LogitOfLine(line));
        labels.push_back(l.label);
        probabilities.push_back(PlantedModel::Sigmoid(l.logit));
      }
    }
    const PlantedMetrics& m = name == "train" ? result.train : result.holdout;
    EXPECT_EQ(static_cast<int64_t>(labels.size()), m.rows);
    const double auc = ExactAuc(labels, probabilities);
    const double log_loss = LogLoss(labels, probabilities);
    EXPECT_GT(auc, 0.7) << name;
    EXPECT_NEAR(auc, m.auc, 1e-9) << name;
    EXPECT_NEAR(log_loss, m.log_loss, 1e-9) << name;
    EXPECT_NEAR(auc, MetaNumber(meta, name, "planted_auc"), 1e-9) << name;
    EXPECT_NEAR(log_loss, MetaNumber(meta, name, "planted_log_loss"), 1e-9)
        << name;
  }
}

TEST(DatagenTest, CategoricalValuesRoundTripThroughTheirHexText) {
  PlantedModelOptions options;
  options.vocab_sizes.assign(kCriteoNumCategorical, 1000);
  options.vocab_sizes[3] = 1;
  STRATA_ASSERT_OK_AND_ASSIGN(PlantedModel model,
                              PlantedModel::Create(options));
  for (int f : {0, 3, 25}) {
    for (uint32_t rank = 1; rank <= options.vocab_sizes[f]; ++rank) {
      uint32_t back = 0;
      ASSERT_TRUE(model.RankOf(f, model.HexOf(f, rank), &back));
      ASSERT_EQ(back, rank);
    }
  }
  uint32_t rank = 0;
  EXPECT_FALSE(model.RankOf(3, model.HexOf(3, 2), &rank));
  EXPECT_NE(model.HexOf(0, 1), model.HexOf(1, 1));
}

TEST(DatagenTest, ScalesTurnFirstOrderEffectsAndInteractionsOnAndOff) {
  // Logits of rows that differ only in two categorical values, under each
  // kind of effect alone: first-order effects add up (the change of two
  // values is the sum of the changes of each); interactions do not.
  auto logits = [](double first_order, double interaction) {
    PlantedModelOptions options;
    options.vocab_sizes.assign(kCriteoNumCategorical, 50);
    options.first_order_scale = first_order;
    options.interaction_scale = interaction;
    absl::StatusOr<PlantedModel> model = PlantedModel::Create(options);
    EXPECT_THAT(model.status(), IsOk());
    SyntheticRow base;
    for (int f = 0; f < kCriteoNumCategorical; ++f) base.ranks[f] = 1;
    SyntheticRow first = base, second = base, both = base;
    first.ranks[0] = second.ranks[1] = 2;
    both.ranks[0] = both.ranks[1] = 2;
    const double b = model->Logit(base);
    return std::vector<double>{model->Logit(first) - b,
                               model->Logit(second) - b,
                               model->Logit(both) - b};
  };
  const std::vector<double> additive = logits(1.5, 0);
  EXPECT_NEAR(additive[2], additive[0] + additive[1], 1e-9);
  EXPECT_GT(std::abs(additive[0]), 1e-3);
  const std::vector<double> pairwise = logits(0, 1);
  EXPECT_GT(std::abs(pairwise[2] - pairwise[0] - pairwise[1]), 1e-4);
  const std::vector<double> none = logits(0, 0);
  EXPECT_EQ(none[0], 0.0);
  EXPECT_EQ(none[2], 0.0);

  DatagenOptions options = SmallOptions("/tmp/unused");
  options.model.interaction_scale = -1;
  EXPECT_THAT(ValidateDatagenOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("interaction_scale -1")));
  options.model.interaction_scale = 0;
  options.model.first_order_scale = 101;
  EXPECT_THAT(ValidateDatagenOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("first_order_scale 101")));
}

TEST(DatagenTest, BadOptionsAreRejected) {
  EXPECT_THAT(ParseVocabSizes("1,2,3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("need 26 vocabulary sizes, got 3")));
  EXPECT_THAT(ParseVocabSizes("10,x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x'")));
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> sizes, ParseVocabSizes(""));
  EXPECT_EQ(sizes.front(), 10);
  EXPECT_EQ(sizes.back(), 2000000);
  DatagenOptions options = SmallOptions("/tmp/unused");
  EXPECT_THAT(ValidateDatagenOptions(options), IsOk());
  options.model.zipf_s = 1.0;
  EXPECT_THAT(
      ValidateDatagenOptions(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zipf_s")));
  options = SmallOptions("/tmp/unused");
  options.files = 0;
  EXPECT_THAT(ValidateDatagenOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("files")));
  options = SmallOptions("");
  EXPECT_THAT(GenerateData(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = SmallOptions("/nonexistent-dir/x");
  EXPECT_THAT(
      GenerateData(options).status(),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent-dir/x")));
}

TEST(DatagenTest, BinaryWritesDataAndRejectsBadFlags) {
  const char* bin_dir = std::getenv("STRATA_BIN_DIR");
  if (bin_dir == nullptr) GTEST_SKIP() << "STRATA_BIN_DIR is not set";
  const TempDir temp_dir("datagen");
  const std::string& dir = temp_dir.path();
  const std::string bin = absl::StrCat(bin_dir, "/strata-datagen");
  const std::string ok =
      absl::StrCat(bin, " --rows=500 --holdout_rows=100 --out=", dir, "/x > ",
                   dir, "/stdout");
  ASSERT_EQ(std::system(ok.c_str()), 0);
  EXPECT_THAT(ReadTextFile(dir + "/stdout"), HasSubstr("planted AUC"));
  EXPECT_THAT(ReadTextFile(dir + "/x.meta.json"), HasSubstr("planted_auc"));
  const std::string bad = absl::StrCat(bin, " --rows=10 --out=", dir,
                                       "/y --zipf_s=0.5 2>/dev/null");
  const int status = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);

  const std::string realistic = absl::StrCat(
      bin, " --generator=realistic --rows=2000 --holdout_rows=500 --out=", dir,
      "/z > ", dir, "/stdout_z");
  ASSERT_EQ(std::system(realistic.c_str()), 0);
  EXPECT_THAT(ReadTextFile(dir + "/stdout_z"),
              HasSubstr("ceilings on the holdout: Bayes AUC"));
  EXPECT_THAT(ReadTextFile(dir + "/z.meta.json"), HasSubstr("learnable_auc"));
  const std::string unknown = absl::StrCat(bin, " --generator=dlrm --out=", dir,
                                           "/w 2> ", dir, "/stderr_w");
  const int unknown_status = std::system(unknown.c_str());
  ASSERT_TRUE(WIFEXITED(unknown_status));
  EXPECT_EQ(WEXITSTATUS(unknown_status), 2);
  EXPECT_THAT(ReadTextFile(dir + "/stderr_w"), HasSubstr("'dlrm'"));
}

}  // namespace
}  // namespace strata
