#include "common/float_bounds.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr float kLargest = std::numeric_limits<float>::max();

// 150 values: two whole blocks of 64 and a rest of 22, so that each of the
// checked positions falls in a block or in the rest.
std::vector<float> Values() {
  std::vector<float> values(150);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i);
  }
  return values;
}

TEST(FloatBoundsTest, BoundIsInclusiveAndSignIgnored) {
  std::vector<float> values = Values();
  EXPECT_TRUE(AllMagnitudesAtMost(values, 149.0f));
  EXPECT_FALSE(AllMagnitudesAtMost(values, 148.0f));  // -149 at the end
  values.back() = 0.0f;
  EXPECT_TRUE(AllMagnitudesAtMost(values, 148.0f));
  EXPECT_TRUE(AllMagnitudesAtMost({}, 0.0f));
}

TEST(FloatBoundsTest, InfinityAndNanFailEveryFiniteBound) {
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::quiet_NaN()};
  for (size_t at : {0, 63, 64, 127, 128, 149}) {
    for (float value : bad) {
      std::vector<float> values = Values();
      values[at] = value;
      EXPECT_FALSE(AllMagnitudesAtMost(values, kLargest))
          << value << " at " << at;
      EXPECT_FALSE(AllMagnitudesAtMost(values, 1e9f)) << value << " at " << at;
    }
  }
  std::vector<float> values = Values();
  values[70] = kLargest;
  values[140] = -kLargest;
  EXPECT_TRUE(AllMagnitudesAtMost(values, kLargest));
  EXPECT_FALSE(AllMagnitudesAtMost(values, 1e9f));
}

}  // namespace
}  // namespace strata
