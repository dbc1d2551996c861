#include "embedding/table_config.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

EmbeddingTableConfig ValidConfig() {
  EmbeddingTableConfig config;
  config.name = "user";
  config.dim = 16;
  return config;
}

// Every float field of a config, named as Validate names them.
std::vector<std::pair<std::string, float*>> FloatFields(
    EmbeddingTableConfig& c) {
  return {{"initializer.value", &c.initializer.value},
          {"initializer.min", &c.initializer.min},
          {"initializer.max", &c.initializer.max},
          {"initializer.mean", &c.initializer.mean},
          {"initializer.stddev", &c.initializer.stddev},
          {"optimizer.learning_rate", &c.optimizer.learning_rate},
          {"optimizer.initial_accumulator", &c.optimizer.initial_accumulator},
          {"optimizer.epsilon", &c.optimizer.epsilon},
          {"optimizer.beta1", &c.optimizer.beta1},
          {"optimizer.beta2", &c.optimizer.beta2},
          {"optimizer.ftrl_beta", &c.optimizer.ftrl_beta},
          {"optimizer.l1", &c.optimizer.l1},
          {"optimizer.l2", &c.optimizer.l2}};
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// Field-by-field, floats bit for bit (so -0 differs from 0).
void ExpectIdentical(EmbeddingTableConfig a, EmbeddingTableConfig b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.initializer.type, b.initializer.type);
  EXPECT_EQ(a.optimizer.type, b.optimizer.type);
  const auto fields_a = FloatFields(a);
  const auto fields_b = FloatFields(b);
  for (size_t i = 0; i < fields_a.size(); ++i) {
    EXPECT_TRUE(SameBits(*fields_a[i].second, *fields_b[i].second))
        << fields_a[i].first << ": " << *fields_a[i].second << " vs "
        << *fields_b[i].second;
  }
}

TEST(TableConfigTest, ValidConfigsPass) {
  EXPECT_THAT(ValidateTableConfig(ValidConfig()), IsOk());
  EmbeddingTableConfig config = ValidConfig();
  config.name = "Item_emb-v2.0";
  config.dim = 1;
  EXPECT_THAT(ValidateTableConfig(config), IsOk());
  config.name = std::string(kMaxTableNameLength, 'n');
  config.dim = kMaxTableDim;
  EXPECT_THAT(ValidateTableConfig(config), IsOk());
}

TEST(TableConfigTest, ValidateRejectsEmptyOrLongName) {
  EmbeddingTableConfig config = ValidConfig();
  config.name = "";
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("name")));
  config.name = std::string(kMaxTableNameLength + 1, 'n');
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("name")));
}

TEST(TableConfigTest, ValidateRejectsConfigsWhoseRowsWouldOverflow) {
  EmbeddingTableConfig sgd = ValidConfig();
  sgd.optimizer.type = OptimizerType::kSgd;
  sgd.optimizer.learning_rate = 3e38f;
  EmbeddingTableConfig uniform = ValidConfig();
  uniform.initializer.type = InitializerType::kUniform;
  uniform.initializer.min = -3.4e38f;
  uniform.initializer.max = 3.4e38f;
  EmbeddingTableConfig normal = ValidConfig();
  normal.initializer.type = InitializerType::kTruncatedNormal;
  normal.initializer.stddev = 3e38f;
  for (const auto& [config, field] :
       {std::make_pair(sgd, "optimizer.learning_rate"),
        std::make_pair(uniform, "initializer.min"),
        std::make_pair(normal, "initializer.stddev")}) {
    EXPECT_THAT(ValidateTableConfig(config),
                StatusIs(kInvalid, ::testing::AllOf(HasSubstr(field),
                                                    HasSubstr("overflow"))));
  }
  EmbeddingTableConfig edge = ValidConfig();
  edge.optimizer.learning_rate = kMaxLearningRate;
  edge.initializer.type = InitializerType::kUniform;
  edge.initializer.min = -kMaxInitialMagnitude;
  edge.initializer.max = kMaxInitialMagnitude;
  EXPECT_THAT(ValidateTableConfig(edge), IsOk());
}

TEST(TableConfigTest, ValidateRejectsNamesWithBadCharacters) {
  for (const std::string& name :
       {std::string("a b"), std::string("a/b"), std::string("../etc"),
        std::string("a=b"), std::string("tab\t"), std::string("new\nline"),
        std::string("caf\xC3\xA9"), std::string("nul\0byte", 8),
        std::string("a:b"), std::string("."), std::string("..")}) {
    EmbeddingTableConfig config = ValidConfig();
    config.name = name;
    EXPECT_THAT(ValidateTableConfig(config),
                StatusIs(kInvalid, HasSubstr("name")))
        << name;
  }
}

TEST(TableConfigTest, ValidateRejectsDimOutsideOneToMax) {
  EmbeddingTableConfig config = ValidConfig();
  config.dim = 0;
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("dim")));
  config.dim = kMaxTableDim + 1;
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("dim")));
  config.dim = std::numeric_limits<uint32_t>::max();
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("dim")));
}

TEST(TableConfigTest, ValidateRejectsNonFiniteHyperParameters) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    EmbeddingTableConfig probe;
    const size_t num_fields = FloatFields(probe).size();
    for (size_t i = 0; i < num_fields; ++i) {
      EmbeddingTableConfig config = ValidConfig();
      const auto fields = FloatFields(config);
      *fields[i].second = bad;
      EXPECT_THAT(ValidateTableConfig(config),
                  StatusIs(kInvalid, HasSubstr(fields[i].first)))
          << fields[i].first << " = " << bad;
    }
  }
}

TEST(TableConfigTest, ValidateRejectsUniformWithMinAboveMax) {
  EmbeddingTableConfig config = ValidConfig();
  config.initializer.type = InitializerType::kUniform;
  config.initializer.min = 0.5f;
  config.initializer.max = 0.25f;
  EXPECT_THAT(ValidateTableConfig(config),
              StatusIs(kInvalid, HasSubstr("min")));
  config.initializer.max = 0.5f;  // min == max is a constant: allowed.
  EXPECT_THAT(ValidateTableConfig(config), IsOk());
}

TEST(TableConfigTest, ValidateRejectsOutOfRangeHyperParameters) {
  const struct {
    const char* what;
    void (*mutate)(EmbeddingTableConfig&);
  } cases[] = {
      {"zero learning rate",
       [](EmbeddingTableConfig& c) { c.optimizer.learning_rate = 0.0f; }},
      {"negative learning rate",
       [](EmbeddingTableConfig& c) { c.optimizer.learning_rate = -0.1f; }},
      {"negative stddev",
       [](EmbeddingTableConfig& c) {
         c.initializer.type = InitializerType::kTruncatedNormal;
         c.initializer.stddev = -0.1f;
       }},
      {"negative Adagrad accumulator",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kAdagrad;
         c.optimizer.initial_accumulator = -1.0f;
       }},
      {"Adam beta1 = 1",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kAdam;
         c.optimizer.beta1 = 1.0f;
       }},
      {"Adam beta2 < 0",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kAdam;
         c.optimizer.beta2 = -0.5f;
       }},
      {"FTRL l1 < 0",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kFtrl;
         c.optimizer.l1 = -0.1f;
       }},
      {"FTRL l2 < 0",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kFtrl;
         c.optimizer.l2 = -0.1f;
       }},
      {"FTRL beta < 0",
       [](EmbeddingTableConfig& c) {
         c.optimizer.type = OptimizerType::kFtrl;
         c.optimizer.ftrl_beta = -1.0f;
       }},
  };
  for (const auto& c : cases) {
    EmbeddingTableConfig config = ValidConfig();
    c.mutate(config);
    EXPECT_THAT(ValidateTableConfig(config), StatusIs(kInvalid)) << c.what;
  }
}

EmbeddingTableConfig UnusualConfig() {
  EmbeddingTableConfig config;
  config.name = "item.v2-embedding_x";
  config.dim = kMaxTableDim;
  config.seed = std::numeric_limits<uint64_t>::max();
  config.initializer.type = InitializerType::kTruncatedNormal;
  config.initializer.value = 0.1f;
  config.initializer.min = -1e-7f;
  config.initializer.max = 1.0f / 3.0f;
  config.initializer.mean = -0.0f;
  config.initializer.stddev = 9999.999f;  // Near kMaxInitialMagnitude.
  config.optimizer.type = OptimizerType::kFtrl;
  config.optimizer.learning_rate = 0.1f;
  config.optimizer.initial_accumulator = 16777217.0f;  // Rounds to 2^24.
  config.optimizer.epsilon = 1e-7f;
  config.optimizer.beta1 = 0.99999994f;
  config.optimizer.beta2 =
      std::numeric_limits<float>::min();  // Smallest normal.
  config.optimizer.ftrl_beta = 3.14159265f;
  config.optimizer.l1 = 1e-30f;
  config.optimizer.l2 = 123456.789f;
  return config;
}

TEST(TableConfigTest, SerializeThenParseRoundTripsExactly) {
  std::vector<EmbeddingTableConfig> configs = {ValidConfig(), UnusualConfig()};
  for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdagrad,
                                  OptimizerType::kAdam, OptimizerType::kFtrl}) {
    for (InitializerType initializer :
         {InitializerType::kZeros, InitializerType::kConstant,
          InitializerType::kUniform, InitializerType::kTruncatedNormal}) {
      EmbeddingTableConfig config = ValidConfig();
      config.optimizer.type = optimizer;
      config.initializer.type = initializer;
      configs.push_back(config);
    }
  }
  for (const EmbeddingTableConfig& config : configs) {
    const std::string text = SerializeTableConfig(config);
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    auto parsed = ParseTableConfig(text);
    ASSERT_THAT(parsed, IsOk()) << text;
    ExpectIdentical(*parsed, config);
    EXPECT_TRUE(SameTableConfig(*parsed, config)) << text;
    EXPECT_EQ(SerializeTableConfig(*parsed), text);
  }
}

TEST(TableConfigTest, SubnormalHyperParametersRoundTrip) {
  // Validate accepts them, so a stored table holding one must load again.
  EmbeddingTableConfig config = ValidConfig();
  config.optimizer.l2 = std::numeric_limits<float>::denorm_min();
  config.initializer.value = -1e-40f;
  ASSERT_THAT(ValidateTableConfig(config), IsOk());
  auto parsed = ParseTableConfig(SerializeTableConfig(config));
  ASSERT_THAT(parsed, IsOk()) << SerializeTableConfig(config);
  ExpectIdentical(*parsed, config);
}

TEST(TableConfigTest, SameTableConfigSeesAOneUlpDifference) {
  const EmbeddingTableConfig a = UnusualConfig();
  EXPECT_TRUE(SameTableConfig(a, a));
  EmbeddingTableConfig b = a;
  b.optimizer.learning_rate = std::nextafter(a.optimizer.learning_rate, 1.0f);
  EXPECT_FALSE(SameTableConfig(a, b));
  b = a;
  b.seed = a.seed - 1;
  EXPECT_FALSE(SameTableConfig(a, b));
  b = a;
  b.name = "other";
  EXPECT_FALSE(SameTableConfig(a, b));
  b = a;
  b.initializer.type = InitializerType::kUniform;
  EXPECT_FALSE(SameTableConfig(a, b));
}

TEST(TableConfigTest, ParseRejectsCorruptText) {
  const std::string good = SerializeTableConfig(ValidConfig());
  for (const std::string& text :
       {std::string(""), std::string("garbage"),
        std::string("name=user dim=16"),
        absl::StrReplaceAll(good, {{"dim=16", "dim=x"}}),
        absl::StrReplaceAll(good, {{"optimizer=adagrad", "optimizer=rmsprop"}}),
        absl::StrReplaceAll(good, {{"lr=0.00999999978", "lr=fast"}})}) {
    ASSERT_NE(text, good);
    EXPECT_THAT(ParseTableConfig(text), StatusIs(absl::StatusCode::kDataLoss))
        << text;
  }
}

TEST(TableConfigTest, AdmissionAndEvictionRoundTripAndOldRecordsParse) {
  EmbeddingTableConfig config = ValidConfig();
  config.admission = {5, 0.125f, 4096, 3};
  config.eviction = {1000, 3600, 1e-3f};
  auto parsed = ParseTableConfig(SerializeTableConfig(config));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(parsed->admission.min_count, 5u);
  EXPECT_EQ(parsed->admission.probability, 0.125f);
  EXPECT_EQ(parsed->admission.sketch_width, 4096u);
  EXPECT_EQ(parsed->admission.sketch_depth, 3u);
  EXPECT_EQ(parsed->eviction.after_steps, 1000u);
  EXPECT_EQ(parsed->eviction.after_seconds, 3600u);
  EXPECT_EQ(parsed->eviction.min_norm, 1e-3f);
  EXPECT_TRUE(SameTableConfig(*parsed, config));
  EmbeddingTableConfig other = config;
  other.eviction.after_seconds = 3601;
  EXPECT_FALSE(SameTableConfig(other, config));
  // A record written before these fields existed: both policies off.
  const std::string text = SerializeTableConfig(ValidConfig());
  auto old = ParseTableConfig(text.substr(0, text.find(" admit_min_count=")));
  ASSERT_THAT(old, IsOk());
  EXPECT_EQ(old->admission.min_count, 0u);
  EXPECT_EQ(old->admission.probability, 1.0f);
  EXPECT_EQ(old->eviction.after_steps, 0u);
  EXPECT_EQ(old->eviction.min_norm, 0.0f);
  EXPECT_TRUE(SameTableConfig(*old, ValidConfig()));
  EXPECT_THAT(ParseTableConfig(absl::StrReplaceAll(
                  text, {{"evict_after_steps=0", "evict_after_steps=soon"}})),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(TableConfigTest, ValidateNamesTheBadAdmissionOrEvictionField) {
  struct Case {
    std::function<void(EmbeddingTableConfig&)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.admission.probability = 0.0f; }, "admit_probability"},
      {[](auto& c) { c.admission.probability = 1.5f; }, "admit_probability"},
      {[](auto& c) { c.admission.probability = NAN; }, "admit_probability"},
      {[](auto& c) { c.admission.min_count = kMaxAdmitMinCount + 1; },
       "admit_min_count"},
      {[](auto& c) { c.admission.sketch_width = kMaxSketchWidth + 1; },
       "admit_sketch_width"},
      {[](auto& c) { c.admission.sketch_depth = kMaxSketchDepth + 1; },
       "admit_sketch_depth"},
      {[](auto& c) { c.eviction.min_norm = -1.0f; }, "evict_min_norm"},
      {[](auto& c) { c.eviction.min_norm = INFINITY; }, "evict_min_norm"},
  };
  for (const Case& c : cases) {
    EmbeddingTableConfig config = ValidConfig();
    c.change(config);
    EXPECT_THAT(ValidateTableConfig(config),
                StatusIs(kInvalid, HasSubstr(c.field)));
  }
  EmbeddingTableConfig config = ValidConfig();
  config.admission = {kMaxAdmitMinCount, 1.0f, kMaxSketchWidth,
                      kMaxSketchDepth};
  config.eviction = {1, 1, 0.5f};
  EXPECT_THAT(ValidateTableConfig(config), IsOk());
}

TEST(TableConfigTest, NamesOfOptimizersAndInitializersRoundTrip) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdagrad,
                             OptimizerType::kAdam, OptimizerType::kFtrl}) {
    auto parsed = ParseOptimizerName(OptimizerName(type));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, type);
  }
  for (InitializerType type :
       {InitializerType::kZeros, InitializerType::kConstant,
        InitializerType::kUniform, InitializerType::kTruncatedNormal}) {
    auto parsed = ParseInitializerName(InitializerName(type));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_THAT(ParseOptimizerName("rmsprop"), StatusIs(kInvalid));
  EXPECT_THAT(ParseOptimizerName("SGD"), StatusIs(kInvalid));
  EXPECT_THAT(ParseInitializerName("normal"), StatusIs(kInvalid));
}

TEST(TableConfigTest, DifferenceNamesOnlyTheFieldsThatDiffer) {
  EmbeddingTableConfig existing;
  existing.name = "ads";
  existing.dim = 8;
  EmbeddingTableConfig requested = existing;
  EXPECT_EQ(TableConfigDifference(existing, requested), "");
  requested.dim = 16;
  requested.optimizer.learning_rate = 0.1f;
  EXPECT_EQ(TableConfigDifference(existing, requested),
            "dim=8 (asked 16), lr=0.01 (asked 0.1)");
  // Floats that print alike at six digits are shown exactly.
  requested = existing;
  requested.optimizer.learning_rate = 0.0100000007f;
  EXPECT_EQ(TableConfigDifference(existing, requested),
            "lr=0.00999999978 (asked 0.0100000007)");
}

}  // namespace
}  // namespace strata
