#include "worker/training/feature_tables.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kDim = 8;
constexpr int kFields = 6;

v1::TableConfig Defaults() {
  v1::TableConfig config;
  config.mutable_optimizer()->set_type(v1::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.05f);
  config.mutable_optimizer()->set_initial_accumulator(0.1f);
  config.mutable_initializer()->set_type(v1::TRUNCATED_NORMAL);
  config.mutable_initializer()->set_stddev(0.01f);
  config.set_seed(7);
  config.set_admit_min_count(3);
  return config;
}

absl::StatusOr<std::vector<FeatureTable>> Parse(const std::string& text) {
  return ParseFeatureTables(text, "model.yaml", Defaults(), kDim, kFields);
}

// The error of `text`, which must not parse.
std::string ErrorOf(const std::string& text) {
  auto parsed = Parse(text);
  EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument))
      << text;
  return std::string(parsed.status().message());
}

TEST(FeatureTablesTest, GroupsFieldsAndOverridesOnlyTheKeysGiven) {
  auto tables = Parse(R"(
tables:
  - name: user
    fields: [C1-C3, C5]
    dim: 4
    optimizer: sgd
    learning_rate: 0.5
    admit_min_count: 0
    admit_probability: 0.25
    evict_after_steps: 1000
    memory_budget_mb: 64
  - name: context
    fields: [c4, C6]
    initial_accumulator: 0.2
    init_stddev: 0.05
    admit_sketch_width: 4096
    admit_sketch_depth: 2
    evict_after_seconds: 60
    evict_min_norm: 0.001
)");
  ASSERT_THAT(tables.status(), IsOk());
  ASSERT_EQ(tables->size(), 2u);
  const FeatureTable& user = (*tables)[0];
  EXPECT_EQ(user.name, "user");
  EXPECT_THAT(user.fields, ElementsAre(0, 1, 2, 4));
  EXPECT_EQ(user.config.name(), "user");
  EXPECT_EQ(user.config.dim(), 4u);
  EXPECT_EQ((*tables)[1].config.dim(), static_cast<uint32_t>(kDim));
  // Another optimizer: its own settings start over (zero: the server's
  // default), the learning rate given applies.
  EXPECT_EQ(user.config.optimizer().type(), v1::SGD);
  EXPECT_FLOAT_EQ(user.config.optimizer().learning_rate(), 0.5f);
  EXPECT_EQ(user.config.optimizer().initial_accumulator(), 0.0f);
  EXPECT_EQ(user.config.admit_min_count(), 0u);
  EXPECT_FLOAT_EQ(user.config.admit_probability(), 0.25f);
  EXPECT_EQ(user.config.evict_after_steps(), 1000u);
  EXPECT_EQ(user.config.memory_budget_bytes(), 64u << 20);
  EXPECT_EQ(user.config.seed(), 7u);

  const FeatureTable& context = (*tables)[1];
  EXPECT_THAT(context.fields, ElementsAre(3, 5));
  // Keys not given keep the defaults.
  EXPECT_EQ(context.config.optimizer().type(), v1::ADAGRAD);
  EXPECT_FLOAT_EQ(context.config.optimizer().learning_rate(), 0.05f);
  EXPECT_FLOAT_EQ(context.config.optimizer().initial_accumulator(), 0.2f);
  EXPECT_FLOAT_EQ(context.config.initializer().stddev(), 0.05f);
  EXPECT_EQ(context.config.admit_min_count(), 3u);
  EXPECT_EQ(context.config.admit_sketch_width(), 4096u);
  EXPECT_EQ(context.config.admit_sketch_depth(), 2u);
  EXPECT_EQ(context.config.evict_after_seconds(), 60u);
  EXPECT_FLOAT_EQ(context.config.evict_min_norm(), 0.001f);
  EXPECT_EQ(context.config.memory_budget_bytes(), 0u);
}

TEST(FeatureTablesTest, TheOptimizerAppliesBeforeItsSettingsWhateverTheOrder) {
  v1::TableConfig sgd = Defaults();
  sgd.mutable_optimizer()->set_type(v1::SGD);
  sgd.mutable_optimizer()->set_initial_accumulator(0.3f);  // the flag's
  auto tables = ParseFeatureTables(R"(
tables:
  - name: a
    initial_accumulator: 0.2
    optimizer: adagrad
    fields: [C1-C3]
  - name: b
    optimizer: adagrad
    fields: [C4-C5]
  - name: c
    fields: [C6]
)",
                                   "model.yaml", sgd, kDim, kFields);
  ASSERT_THAT(tables.status(), IsOk());
  EXPECT_EQ((*tables)[0].config.optimizer().type(), v1::ADAGRAD);
  EXPECT_FLOAT_EQ((*tables)[0].config.optimizer().initial_accumulator(), 0.2f);
  // Switching to Adagrad takes the flag's accumulator; staying on SGD drops
  // it (SGD has none).
  EXPECT_FLOAT_EQ((*tables)[1].config.optimizer().initial_accumulator(), 0.3f);
  EXPECT_EQ((*tables)[2].config.optimizer().type(), v1::SGD);
  EXPECT_EQ((*tables)[2].config.optimizer().initial_accumulator(), 0.0f);
}

TEST(FeatureTablesTest, EveryFieldIsInExactlyOneTable) {
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: [C1-C5]}\n"),
              AllOf(HasSubstr("model.yaml"), HasSubstr("C6 is in no table")));
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: [C1-C4]}\n"
                      "  - {name: b, fields: [C4-C6]}\n"),
              AllOf(HasSubstr("tables[1].fields"),
                    HasSubstr("C4 is also in table \"a\"")));
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: [C1-C6, C2]}\n"),
              HasSubstr("C2 is listed twice"));
}

TEST(FeatureTablesTest, BadFieldNamesAndRangesAreNamed) {
  for (const char* item : {"C7", "C0", "D1", "C3-C1", "C1-", "C1-C2-C3", "C"}) {
    EXPECT_THAT(ErrorOf(absl::StrCat("tables:\n  - {name: a, fields: [C1-C6, ",
                                     item, "]}\n")),
                AllOf(HasSubstr("tables[0].fields"),
                      HasSubstr(absl::StrCat("\"", item, "\""))))
        << item;
  }
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: []}\n"),
              HasSubstr("must list fields"));
}

TEST(FeatureTablesTest, BadKeysAndValuesAreNamed) {
  const std::string all = "fields: [C1-C6]";
  struct Case {
    std::string table;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {"{name: a, " + all + ", learning_rte: 1}",
            "tables[0].learning_rte: unknown key"},
           {"{name: a, " + all + ", optimizer: lbfgs}",
            "tables[0].optimizer: unknown \"lbfgs\""},
           {"{name: a, " + all + ", learning_rate: fast}",
            "tables[0].learning_rate: \"fast\" is not a finite number"},
           {"{name: a, " + all + ", admit_min_count: -1}",
            "tables[0].admit_min_count: \"-1\" is not a non-negative"},
           {"{name: a, " + all + ", memory_budget_mb: 99999999999999}",
            "tables[0].memory_budget_mb: is over"},
           {"{name: a, " + all + ", dim: 16}",
            "tables[0].dim: 16 is not in [1, --embedding_dim=8]"},
           {"{name: a, " + all + ", dim: 0}",
            "tables[0].dim: 0 is not in [1, --embedding_dim=8]"},
           {"{name: a, " + all + ", dim: wide}",
            "tables[0].dim: wide is not in [1, --embedding_dim=8]"},
           {"{name: a, " + all + ", learning_rate: nan}",
            "tables[0].learning_rate: \"nan\" is not a finite number"},
           {"{name: a, " + all + ", evict_min_norm: 1e300}",
            "tables[0].evict_min_norm: \"1e300\" is not a finite number"},
           {"{name: a, " + all + ", admit_probability: [1]}",
            "tables[0].admit_probability: must be a scalar"},
           {"{" + all + "}", "tables[0]: has no name"},
           {"{name: a}", "tables[0]: has no fields"},
           {"just text", "tables[0]: must be a map"},
       }) {
    EXPECT_THAT(ErrorOf("tables:\n  - " + c.table + "\n"),
                HasSubstr(c.expected))
        << c.table;
  }
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: [C1-C3]}\n"
                      "  - {name: a, fields: [C4-C6]}\n"),
              HasSubstr("tables[1].name: \"a\" names two tables"));
}

TEST(FeatureTablesTest, TheFileMustBeAMapWithAListOfTables) {
  EXPECT_THAT(ErrorOf("- a\n- b\n"), HasSubstr("must be a map"));
  EXPECT_THAT(ErrorOf("tables: []\n"),
              HasSubstr("tables: must be a non-empty"));
  EXPECT_THAT(ErrorOf("{}\n"), HasSubstr("tables: must be a non-empty"));
  EXPECT_THAT(ErrorOf("tables:\n  - {name: a, fields: [C1-C6]}\nwide: 1\n"),
              HasSubstr("wide: unknown key"));
  EXPECT_THAT(ErrorOf("tables: [\n"), HasSubstr("model.yaml: line"));
}

TEST(FeatureTablesTest, AMissingFileIsNotFoundNamingIt) {
  EXPECT_THAT(
      ReadFeatureTables(FileSystem::Default(), "/nonexistent/model.yaml",
                        Defaults(), kDim, kFields)
          .status(),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("/nonexistent/model.yaml")));
}

TEST(FeatureTablesTest, AFileOverTheLimitIsRefusedUnparsed) {
  const std::string path = ::testing::TempDir() + "/huge_model.yaml";
  ASSERT_THAT(FileSystem::Default()->WriteFileAtomically(
                  path, std::string(kMaxModelConfigBytes + 1, '#')),
              IsOk());
  EXPECT_THAT(
      ReadFeatureTables(FileSystem::Default(), path, Defaults(), kDim, kFields)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("over the limit")));
}

TEST(FeatureTablesTest, TheExampleFileGroupsAllTwentySixFields) {
  auto tables = ReadFeatureTables(
      FileSystem::Default(),
      absl::StrCat(STRATA_SOURCE_DIR, "/examples/model_config.yaml"),
      Defaults(), 16, 26);
  ASSERT_THAT(tables.status(), IsOk());
  ASSERT_EQ(tables->size(), 3u);
  EXPECT_EQ((*tables)[0].name, "user_features");
  EXPECT_EQ((*tables)[0].fields.size(), 10u);
  EXPECT_EQ((*tables)[0].config.admit_min_count(), 2u);
  EXPECT_EQ((*tables)[0].config.memory_budget_bytes(), 256u << 20);
  EXPECT_EQ((*tables)[1].config.evict_after_seconds(), 86400u);
  EXPECT_EQ((*tables)[2].fields.size(), 6u);
  EXPECT_EQ((*tables)[0].config.dim(), 16u);
  EXPECT_EQ((*tables)[2].config.dim(), 8u);
}

}  // namespace
}  // namespace strata
