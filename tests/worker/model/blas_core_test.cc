#include "worker/model/blas_core.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr CpuVectorUnits kBaseline{false, false};
constexpr CpuVectorUnits kAvx2{true, false};
constexpr CpuVectorUnits kAvx512{true, true};

TEST(BlasCoreTest, BaselineKernelsOnAnAvxCpuAreReplaced) {
  EXPECT_EQ(BetterBlasCoreType("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(BetterBlasCoreType("Prescott", kAvx2), "Haswell");
  EXPECT_EQ(BetterBlasCoreType("PRESCOTT", kAvx2), "Haswell");
  EXPECT_EQ(BetterBlasCoreType("Sandybridge", kAvx2), "Haswell");
  EXPECT_EQ(BetterBlasCoreType("Core2", kAvx512), "SkylakeX");
}

TEST(BlasCoreTest, ARecognizedCpuOrOneWithoutAvx2KeepsOpenBlasChoice) {
  EXPECT_EQ(BetterBlasCoreType("Prescott", kBaseline), "");
  EXPECT_EQ(BetterBlasCoreType("Nehalem", kBaseline), "");
  EXPECT_EQ(BetterBlasCoreType("Haswell", kAvx512), "");
  EXPECT_EQ(BetterBlasCoreType("SkylakeX", kAvx512), "");
  EXPECT_EQ(BetterBlasCoreType("Cooperlake", kAvx512), "");
  EXPECT_EQ(BetterBlasCoreType("Zen", kAvx2), "");
  EXPECT_EQ(BetterBlasCoreType("", kAvx512), "");
}

TEST(BlasCoreTest, ReadsTheLibraryAndTheCpu) {
  EXPECT_FALSE(BlasCoreName().empty());
  const CpuVectorUnits units = DetectCpuVectorUnits();
  EXPECT_TRUE(!units.avx512 || units.avx2_fma) << "AVX-512 without AVX2";
}

}  // namespace
}  // namespace strata
