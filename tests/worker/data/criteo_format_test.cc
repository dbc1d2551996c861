#include "worker/data/criteo_format.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

float T(double x) { return static_cast<float>(std::log1p(x)); }

// A line as in the real data: empty integers, a negative one (as I2 has),
// and empty categoricals between full ones.
constexpr char kLine[] =
    "1\t5\t-1\t\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t"
    "68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t"
    "1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t"
    "8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t"
    "\t3a171ecb\tc5c50484\te8b83407\t9727dd16";

TEST(CriteoFormatTest, ParsesARealFormatLineExactly) {
  CriteoExample e;
  ASSERT_THAT(ParseCriteoLine(kLine, &e, nullptr), IsOk());
  EXPECT_EQ(e.label, 1.0f);
  const float expected_dense[kCriteoNumDense] = {
      T(5), 0, 0, 0, T(1382), T(4), T(15), T(2), T(181), T(1), T(2), 0, T(2)};
  for (int i = 0; i < kCriteoNumDense; ++i) {
    EXPECT_EQ(e.dense[i], expected_dense[i]) << "I" << i + 1;
  }
  EXPECT_EQ(e.keys[0], CriteoFeatureKey(0, 0x68fd1e64));
  EXPECT_EQ(e.keys[1], CriteoFeatureKey(1, 0x80e26c9b));
  EXPECT_EQ(e.keys[20], CriteoFeatureKey(20, 0x07b5194c));
  EXPECT_EQ(e.keys[21], CriteoMissingKey(21));
  EXPECT_EQ(e.keys[25], CriteoFeatureKey(25, 0x9727dd16));
}

TEST(CriteoFormatTest, CarriageReturnBeforeNewlineIsIgnored) {
  CriteoExample plain;
  CriteoExample crlf;
  ASSERT_THAT(ParseCriteoLine(kLine, &plain, nullptr), IsOk());
  ASSERT_THAT(ParseCriteoLine(std::string(kLine) + "\r", &crlf, nullptr),
              IsOk());
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    EXPECT_EQ(plain.keys[f], crlf.keys[f]);
  }
  // The last field was "9727dd16\r": still a valid value.
  EXPECT_EQ(crlf.keys[25], CriteoFeatureKey(25, 0x9727dd16));
}

TEST(CriteoFormatTest, MissingTrailingFieldsReadAsEmpty) {
  CriteoExample e;
  // Scribble first: the parser must reset what the line does not have.
  for (float& d : e.dense) d = 7;
  for (uint64_t& k : e.keys) k = 7;
  ASSERT_THAT(ParseCriteoLine("0\t3\t\t9", &e, nullptr), IsOk());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.dense[0], T(3));
  EXPECT_EQ(e.dense[1], 0.0f);
  EXPECT_EQ(e.dense[2], T(9));
  for (int i = 3; i < kCriteoNumDense; ++i) EXPECT_EQ(e.dense[i], 0.0f);
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    EXPECT_EQ(e.keys[f], CriteoMissingKey(f));
  }
  ASSERT_THAT(ParseCriteoLine("1", &e, nullptr), IsOk());
  EXPECT_EQ(e.label, 1.0f);
}

TEST(CriteoFormatTest, DenseTransformIsLogOnePlusClampedValue) {
  EXPECT_EQ(CriteoDenseTransform(0), 0.0f);
  EXPECT_EQ(CriteoDenseTransform(-3), 0.0f);
  EXPECT_EQ(CriteoDenseTransform(1), T(1));
  EXPECT_FLOAT_EQ(CriteoDenseTransform(1000000), std::log(1000001.0));
}

// Small counts come from a table: the same floats as computing them, on
// both sides of the table's end.
TEST(CriteoFormatTest, DenseTransformIsTheSameFloatForEveryCount) {
  for (int64_t x = 0; x < 5000; ++x) {
    const float want = static_cast<float>(std::log1p(static_cast<double>(x)));
    ASSERT_EQ(CriteoDenseTransform(x), want) << x;
  }
}

TEST(CriteoFormatTest, HexIsCaseInsensitive) {
  CriteoExample lower;
  CriteoExample upper;
  ASSERT_THAT(ParseCriteoLine("0" + std::string(14, '\t') + "abcdef01", &lower,
                              nullptr),
              IsOk());
  ASSERT_THAT(ParseCriteoLine("0" + std::string(13, '\t') + "\tABCDEF01",
                              &upper, nullptr),
              IsOk());
  EXPECT_EQ(lower.keys[0], CriteoFeatureKey(0, 0xabcdef01));
  EXPECT_EQ(upper.keys[0], lower.keys[0]);
}

TEST(CriteoFormatTest, HexAcceptsExactlyTheSixteenDigitsOfEitherCase) {
  const std::string hex_digits = "0123456789abcdefABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    const char c = static_cast<char>(byte);
    const bool is_hex = hex_digits.find(c) != std::string::npos;
    for (int position = 0; position < 8; ++position) {
      std::string text = "0a1B2c3D";
      text[position] = c;
      uint32_t value = 0xDEADBEEF;
      ASSERT_EQ(ParseCriteoHex(text, &value), is_hex)
          << "byte " << byte << " at " << position;
      if (!is_hex) {
        EXPECT_EQ(value, 0xDEADBEEF) << "written though refused";
        continue;
      }
      const uint32_t digit = std::stoul(std::string(1, c), nullptr, 16);
      const int shift = 4 * (7 - position);
      const uint32_t want = (0x0a1b2c3du & ~(0xFu << shift)) | digit << shift;
      EXPECT_EQ(value, want) << "byte " << byte << " at " << position;
    }
  }
  uint32_t value = 0;
  EXPECT_FALSE(ParseCriteoHex("0a1b2c3", &value));    // 7 digits
  EXPECT_FALSE(ParseCriteoHex("0a1b2c3d4", &value));  // 9 digits
}

TEST(CriteoFormatTest, KeysDifferAcrossFieldsValuesAndMissing) {
  std::set<uint64_t> keys;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    keys.insert(CriteoMissingKey(f));
    for (uint32_t v : {0u, 1u, 0xFFFFFFFFu, 0x68fd1e64u}) {
      keys.insert(CriteoFeatureKey(f, v));
    }
  }
  EXPECT_EQ(keys.size(), 5u * kCriteoNumCategorical);
}

// Keys are stored in trained tables: a change here invalidates every model.
TEST(CriteoFormatTest, KeysAreStable) {
  EXPECT_EQ(CriteoFeatureKey(0, 0x68fd1e64), 0x2C2F599054236A13ull);
  EXPECT_EQ(CriteoMissingKey(25), 0x0003CB21F8247384ull);
}

struct MalformedCase {
  std::string line;
  CriteoLineError error;
  std::string message;
};

// kCriteoMaxValuesPerField + 1 values of one field.
std::string TooManyValues() {
  std::string text = "00000001";
  for (int i = 0; i < kCriteoMaxValuesPerField; ++i) text += ",00000001";
  return text;
}

TEST(CriteoFormatTest, MultiHotFieldsGiveEveryValueInOrder) {
  // C1 = a, b, a; C2 empty; C3 = ff; C4 holds the most values allowed.
  std::string c4 = "00000001";
  for (int i = 1; i < kCriteoMaxValuesPerField; ++i) c4 += ",00000001";
  const std::string line = "1" + std::string(14, '\t') +
                           "0000000a,0000000b,0000000a\t\t000000ff\t" + c4;
  CriteoExample e;
  ASSERT_THAT(ParseCriteoLine(line, &e, nullptr), IsOk());
  ASSERT_EQ(e.keys.size(), 3u + 1 + 1 + kCriteoMaxValuesPerField + 22);
  EXPECT_EQ(e.begin(0), 0u);
  EXPECT_EQ(e.ends[0], 3u);
  EXPECT_EQ(e.keys[0], CriteoFeatureKey(0, 0xa));
  EXPECT_EQ(e.keys[1], CriteoFeatureKey(0, 0xb));
  EXPECT_EQ(e.keys[2], CriteoFeatureKey(0, 0xa));
  EXPECT_EQ(e.ends[1], 4u);
  EXPECT_EQ(e.keys[3], CriteoMissingKey(1));
  EXPECT_EQ(e.ends[2], 5u);
  EXPECT_EQ(e.keys[4], CriteoFeatureKey(2, 0xff));
  EXPECT_EQ(e.ends[3], 5u + kCriteoMaxValuesPerField);
  EXPECT_EQ(e.keys[5], CriteoFeatureKey(3, 1));
  for (int f = 4; f < kCriteoNumCategorical; ++f) {
    EXPECT_EQ(e.ends[f] - e.begin(f), 1u) << f;
    EXPECT_EQ(e.keys[e.begin(f)], CriteoMissingKey(f)) << f;
  }
  // The next line reuses the example: nothing of this one stays.
  ASSERT_THAT(ParseCriteoLine("0", &e, nullptr), IsOk());
  EXPECT_EQ(e.keys.size(), static_cast<size_t>(kCriteoNumCategorical));
  EXPECT_EQ(e.ends[25], 26u);
}

TEST(CriteoFormatTest, MalformedLinesAreRejectedWithTheReason) {
  const std::string rest_of_line = "\t1" + std::string(38, '\t');
  const MalformedCase cases[] = {
      {"", CriteoLineError::kBadLabel, "label '' is not 0 or 1"},
      {"2" + rest_of_line, CriteoLineError::kBadLabel, "label '2'"},
      {"0.5\t1", CriteoLineError::kBadLabel, "label '0.5'"},
      {"1\t12x", CriteoLineError::kBadInteger, "I1 '12x' is not an integer"},
      {"1\t1\t1.5", CriteoLineError::kBadInteger, "I2 '1.5'"},
      {"1\t-", CriteoLineError::kBadInteger, "I1 '-'"},
      {"1\t+4", CriteoLineError::kBadInteger, "I1 '+4'"},
      {"1\t99999999999999999999", CriteoLineError::kBadInteger, "I1"},
      {"1" + std::string(14, '\t') + "68fd1e6g",
       CriteoLineError::kBadCategorical, "C1 '68fd1e6g' is not 8 hex digits"},
      {"1" + std::string(15, '\t') + "68fd1e6",
       CriteoLineError::kBadCategorical, "C2 '68fd1e6'"},
      {"1" + std::string(40, '\t'), CriteoLineError::kTooManyFields,
       "more than 40 fields"},
      // Multi-hot: every value is checked, and an empty one is not a value.
      {"1" + std::string(14, '\t') + "0000000a,zz",
       CriteoLineError::kBadCategorical, "C1 'zz' is not 8 hex digits"},
      {"1" + std::string(14, '\t') + "0000000a,",
       CriteoLineError::kBadCategorical, "C1 '' is not 8 hex digits"},
      {"1" + std::string(14, '\t') + TooManyValues(),
       CriteoLineError::kTooManyValues, "C1 has more than 1024 values"},
  };
  for (const MalformedCase& c : cases) {
    CriteoExample e;
    CriteoLineError error = CriteoLineError::kNone;
    EXPECT_THAT(
        ParseCriteoLine(c.line, &e, &error),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.line;
    EXPECT_EQ(error, c.error) << c.line;
  }
}

}  // namespace
}  // namespace strata
