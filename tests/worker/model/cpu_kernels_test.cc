// The CPU model's dot-interaction kernels against a plain loop per example,
// over shapes that cover their partial blocks (examples not a multiple of
// 16), their component and pair chunks (dimensions and counts not a
// multiple of 4 or 8), for every build of the kernels this CPU runs.

#include "worker/model/internal/cpu_kernels.h"

#include <cstddef>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace model_internal {
namespace {

struct Shape {
  int count;  // Vectors per example.
  int dim;
  int examples;
};

// Feature-major storage as the model lays it out: `rows` rows of `stride`
// floats, the examples in the first columns.
struct FeatureMajor {
  FeatureMajor(int rows, int examples)
      : stride(FeatureMajorStride(examples)), values(rows * stride) {}
  float& at(int row, int example) { return values[row * stride + example]; }
  size_t stride;
  std::vector<float> values;
};

void FillRandom(FeatureMajor& m, std::mt19937& random) {
  std::uniform_real_distribution<float> value(-1, 1);
  for (float& v : m.values) v = value(random);
}

// Each test draws its shape's vectors; pairs() rows hold per-pair values.
class DotInteractionKernelTest : public ::testing::TestWithParam<Shape> {
 protected:
  DotInteractionKernelTest()
      : shape_(GetParam()),
        random_(shape_.count * 1000 + shape_.dim * 10 + shape_.examples),
        vectors_(shape_.count * shape_.dim, shape_.examples) {
    FillRandom(vectors_, random_);
  }
  int pairs() const { return shape_.count * (shape_.count - 1) / 2; }
  void ExpectEachPairsDotProduct(FeatureMajor& dots);

  const Shape shape_;
  std::mt19937 random_;
  FeatureMajor vectors_;
};

TEST_P(DotInteractionKernelTest, ForwardIsEachPairsDotProduct) {
  for (const InteractionKernels& kernels : SupportedInteractionKernels()) {
    SCOPED_TRACE(kernels.name);
    FeatureMajor dots(pairs(), shape_.examples);
    kernels.forward(vectors_.values.data(), shape_.count, shape_.dim,
                    shape_.examples, vectors_.stride, dots.values.data());
    ExpectEachPairsDotProduct(dots);
  }
}

TEST_P(DotInteractionKernelTest, TheDefaultForwardIsTheBestBuild) {
  FeatureMajor best(pairs(), shape_.examples);
  SupportedInteractionKernels().front().forward(
      vectors_.values.data(), shape_.count, shape_.dim, shape_.examples,
      vectors_.stride, best.values.data());
  FeatureMajor dots(pairs(), shape_.examples);
  DotInteractionBatch(vectors_.values.data(), shape_.count, shape_.dim,
                      shape_.examples, vectors_.stride, dots.values.data());
  for (int e = 0; e < shape_.examples; ++e) {
    for (int pair = 0; pair < pairs(); ++pair) {
      ASSERT_EQ(dots.at(pair, e), best.at(pair, e)) << "pair " << pair;
    }
  }
}

void DotInteractionKernelTest::ExpectEachPairsDotProduct(FeatureMajor& dots) {
  const Shape& shape = shape_;
  FeatureMajor& vectors = vectors_;
  for (int e = 0; e < shape.examples; ++e) {
    int pair = 0;
    for (int a = 0; a < shape.count; ++a) {
      for (int b = a + 1; b < shape.count; ++b, ++pair) {
        double want = 0;
        for (int d = 0; d < shape.dim; ++d) {
          want += static_cast<double>(vectors.at(a * shape.dim + d, e)) *
                  vectors.at(b * shape.dim + d, e);
        }
        ASSERT_NEAR(dots.at(pair, e), want, 1e-4)
            << "example " << e << ", pair (" << a << ", " << b << ")";
      }
    }
  }
}

TEST_P(DotInteractionKernelTest, BackwardWritesEachPairsGradientToBothSides) {
  const Shape& shape = shape_;
  FeatureMajor& vectors = vectors_;
  FeatureMajor pair_grads(pairs(), shape.examples);
  FillRandom(pair_grads, random_);
  FeatureMajor want(shape.count * shape.dim, shape.examples);

  for (int e = 0; e < shape.examples; ++e) {
    int pair = 0;
    for (int a = 0; a < shape.count; ++a) {
      for (int b = a + 1; b < shape.count; ++b, ++pair) {
        const float g = pair_grads.at(pair, e);
        for (int d = 0; d < shape.dim; ++d) {
          want.at(a * shape.dim + d, e) += g * vectors.at(b * shape.dim + d, e);
          want.at(b * shape.dim + d, e) += g * vectors.at(a * shape.dim + d, e);
        }
      }
    }
  }
  for (const InteractionKernels& kernels : SupportedInteractionKernels()) {
    SCOPED_TRACE(kernels.name);
    // The kernel writes every row: what was there is overwritten.
    FeatureMajor grads(shape.count * shape.dim, shape.examples);
    FillRandom(grads, random_);
    kernels.backward(vectors.values.data(), pair_grads.values.data(),
                     shape.count, shape.dim, shape.examples, vectors.stride,
                     grads.values.data());
    for (int e = 0; e < shape.examples; ++e) {
      for (int row = 0; row < shape.count * shape.dim; ++row) {
        ASSERT_NEAR(grads.at(row, e), want.at(row, e), 1e-4)
            << "example " << e << ", vector " << row / shape.dim
            << ", component " << row % shape.dim;
      }
    }
  }
}

// The AVX2 and AVX-512 builds both use FMA and sum each example's terms in
// the same order, so a model trains to the same bits on either.
TEST_P(DotInteractionKernelTest, TheFmaBuildsAgreeBitForBit) {
  std::vector<const InteractionKernels*> fma_builds;
  for (const InteractionKernels& kernels : SupportedInteractionKernels()) {
    if (std::string(kernels.name) != "baseline") fma_builds.push_back(&kernels);
  }
  if (fma_builds.size() < 2) {
    GTEST_SKIP() << "this CPU runs " << fma_builds.size()
                 << " of the FMA builds; the comparison needs both";
  }
  const Shape& shape = shape_;
  FeatureMajor pair_grads(pairs(), shape.examples);
  FillRandom(pair_grads, random_);
  std::vector<FeatureMajor> dots, grads;
  for (const InteractionKernels* kernels : fma_builds) {
    dots.emplace_back(pairs(), shape.examples);
    kernels->forward(vectors_.values.data(), shape.count, shape.dim,
                     shape.examples, vectors_.stride,
                     dots.back().values.data());
    grads.emplace_back(shape.count * shape.dim, shape.examples);
    kernels->backward(vectors_.values.data(), pair_grads.values.data(),
                      shape.count, shape.dim, shape.examples, vectors_.stride,
                      grads.back().values.data());
  }
  for (int e = 0; e < shape.examples; ++e) {
    for (int pair = 0; pair < pairs(); ++pair) {
      ASSERT_EQ(dots[0].at(pair, e), dots[1].at(pair, e)) << "pair " << pair;
    }
    for (int row = 0; row < shape.count * shape.dim; ++row) {
      ASSERT_EQ(grads[0].at(row, e), grads[1].at(row, e)) << "row " << row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotInteractionKernelTest,
                         ::testing::Values(Shape{2, 1, 1}, Shape{2, 4, 16},
                                           Shape{3, 3, 17}, Shape{5, 5, 31},
                                           Shape{4, 8, 33}, Shape{27, 16, 40},
                                           Shape{7, 9, 64}, Shape{6, 13, 5},
                                           Shape{10, 17, 48}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "count" + std::to_string(info.param.count) +
                                  "_dim" + std::to_string(info.param.dim) +
                                  "_examples" +
                                  std::to_string(info.param.examples);
                         });

// Each float lands at its transposed place, and nothing outside the
// destination's rows x cols block is written: shapes with and without
// partial 4 x 4 blocks, between arrays wider than the block.
TEST(TransposeFloatsTest, MovesEachFloatAndNothingElse) {
  constexpr float kUntouched = -7.0f;
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{
           {1, 1}, {4, 4}, {3, 5}, {16, 16}, {17, 13}, {1024, 16}, {16, 3}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const size_t src_stride = cols + 3;
    const size_t dst_stride = rows + 5;
    std::vector<float> src(rows * src_stride);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
    std::vector<float> dst(cols * dst_stride + 2, kUntouched);
    TransposeFloats(src.data(), src_stride, rows, cols, dst.data(), dst_stride);
    for (int c = 0; c < cols; ++c) {
      for (size_t r = 0; r < dst_stride; ++r) {
        const float want = r < static_cast<size_t>(rows)
                               ? src[r * src_stride + c]
                               : kUntouched;
        ASSERT_EQ(dst[c * dst_stride + r], want) << "row " << r << " col " << c;
      }
    }
    EXPECT_EQ(dst[cols * dst_stride], kUntouched);
    EXPECT_EQ(dst[cols * dst_stride + 1], kUntouched);
  }
}

}  // namespace
}  // namespace model_internal
}  // namespace strata
