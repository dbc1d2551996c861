#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "worker/model/dense_model.h"
#include "worker/model/model_config.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

// A batch with its own storage; multi-hot when max_hot > 1.
struct OwnedBatch {
  std::vector<float> dense, labels, embeddings;
  std::vector<uint32_t> offsets, rows;
  int batch_size = 0;
  int num_rows = 0;

  ModelBatch View() const {
    ModelBatch b;
    b.batch_size = batch_size;
    b.dense = dense;
    b.labels = labels;
    b.offsets = offsets;
    b.rows = rows;
    b.embeddings = embeddings;
    b.num_rows = num_rows;
    return b;
  }
};

OwnedBatch RandomBatch(const ModelConfig& config, int batch_size, int num_rows,
                       int max_hot, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  OwnedBatch b;
  b.batch_size = batch_size;
  b.num_rows = num_rows;
  for (int i = 0; i < batch_size * config.num_dense; ++i) {
    b.dense.push_back(value(rng) + 0.5f);
  }
  for (int i = 0; i < batch_size; ++i) b.labels.push_back(rng() % 2);
  for (int i = 0; i < num_rows * config.embedding_dim; ++i) {
    b.embeddings.push_back(value(rng));
  }
  b.offsets.push_back(0);
  for (int s = 0; s < batch_size * config.num_fields; ++s) {
    const int hot = max_hot == 1 ? 1 : static_cast<int>(rng() % (max_hot + 1));
    for (int k = 0; k < hot; ++k) b.rows.push_back(rng() % num_rows);
    b.offsets.push_back(b.rows.size());
  }
  return b;
}

ModelConfig SmallConfig() {
  ModelConfig config;
  config.num_dense = 3;
  config.num_fields = 3;
  config.embedding_dim = 4;
  config.bottom_hidden = {5};
  config.top_hidden = {6};
  config.seed = 7;
  return config;
}

double Loss(DenseModel* model, const ModelBatch& batch) {
  std::vector<float> dense(model->layout().num_parameters);
  std::vector<float> rows(batch.embeddings.size());
  std::vector<float> probs(batch.batch_size);
  auto loss =
      model->ForwardBackward(batch, absl::MakeSpan(dense), absl::MakeSpan(rows),
                             absl::MakeSpan(probs));
  EXPECT_THAT(loss.status(), IsOk());
  return *loss;
}

void ExpectNear(double analytic, double numeric, const char* what, size_t i) {
  EXPECT_NEAR(analytic, numeric, 3e-3 + 3e-2 * std::abs(numeric))
      << what << " " << i;
}

// Checks both gradients against central differences of the summed loss.
void CheckGradients(const ModelConfig& config, int max_hot,
                    int batch_size = 5) {
  auto model = CreateCpuDenseModel(config);
  ASSERT_THAT(model.status(), IsOk());
  // Nonzero biases keep pre-activations away from ReLU's kink at 0, where a
  // finite difference is not a derivative.
  std::vector<float> params = InitialDenseParameters(config);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> jitter(0.05f, 0.2f);
  for (float& p : params) p += jitter(rng);
  ASSERT_THAT((*model)->SetParameters(params), IsOk());
  OwnedBatch batch = RandomBatch(config, batch_size, 7, max_hot, 11);

  std::vector<float> dense_grad(params.size());
  std::vector<float> row_grad(batch.embeddings.size());
  std::vector<float> probs(batch.batch_size);
  ASSERT_THAT(
      (*model)
          ->ForwardBackward(batch.View(), absl::MakeSpan(dense_grad),
                            absl::MakeSpan(row_grad), absl::MakeSpan(probs))
          .status(),
      IsOk());

  constexpr float kEps = 3e-4f;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> p = params;
    p[i] += kEps;
    ASSERT_THAT((*model)->SetParameters(p), IsOk());
    const double up = Loss(model->get(), batch.View());
    p[i] -= 2 * kEps;
    ASSERT_THAT((*model)->SetParameters(p), IsOk());
    const double down = Loss(model->get(), batch.View());
    ExpectNear(dense_grad[i], (up - down) / (2 * kEps), "dense parameter", i);
  }
  ASSERT_THAT((*model)->SetParameters(params), IsOk());
  for (size_t i = 0; i < batch.embeddings.size(); ++i) {
    OwnedBatch b = batch;
    b.embeddings[i] += kEps;
    const double up = Loss(model->get(), b.View());
    b.embeddings[i] -= 2 * kEps;
    const double down = Loss(model->get(), b.View());
    ExpectNear(row_grad[i], (up - down) / (2 * kEps), "row value", i);
  }
}

TEST(CpuDenseModelTest, DotInteractionGradientsMatchFiniteDifferences) {
  CheckGradients(SmallConfig(), 1);
}

TEST(CpuDenseModelTest, ConcatInteractionGradientsMatchFiniteDifferences) {
  ModelConfig config = SmallConfig();
  config.interaction = Interaction::kConcat;
  CheckGradients(config, 1);
}

TEST(CpuDenseModelTest, MultiHotSumAndMeanGradientsMatchFiniteDifferences) {
  ModelConfig config = SmallConfig();
  CheckGradients(config, 3);
  config.pooling = Pooling::kMean;
  CheckGradients(config, 3);
}

// The model pools and scatters 16 examples at a time: a batch of 21 has a
// full tile and a partial one, and its 7 rows are shared across both.
TEST(CpuDenseModelTest, GradientsMatchAcrossTilesOfExamples) {
  ModelConfig config = SmallConfig();
  CheckGradients(config, 2, 21);
  config.pooling = Pooling::kMean;
  CheckGradients(config, 2, 21);
}

TEST(CpuDenseModelTest, DefaultLayoutHasDlrmShape) {
  const DenseLayout layout = MakeDenseLayout(ModelConfig());
  EXPECT_EQ(layout.interaction_width, 16 + 27 * 26 / 2);
  // 13*64+64 + 64*16+16 + 367*128+128 + 128*64+64 + 64+1.
  EXPECT_EQ(layout.num_parameters, 57361u);
  EXPECT_FALSE(layout.top.back().relu);
  EXPECT_TRUE(layout.bottom.back().relu);
  EXPECT_THAT(DescribeModel(ModelConfig()), HasSubstr("13 -> 64 -> 16"));
}

TEST(CpuDenseModelTest, ZeroParametersGiveHalfProbabilityAndLogTwoLoss) {
  const ModelConfig config = SmallConfig();
  auto model = CreateCpuDenseModel(config);
  ASSERT_THAT(model.status(), IsOk());
  ASSERT_THAT((*model)->SetParameters(
                  std::vector<float>((*model)->layout().num_parameters, 0.0f)),
              IsOk());
  OwnedBatch batch = RandomBatch(config, 4, 3, 1, 3);
  std::vector<float> probs(4);
  ASSERT_THAT((*model)->Predict(batch.View(), absl::MakeSpan(probs)), IsOk());
  for (float p : probs) EXPECT_FLOAT_EQ(p, 0.5f);
  EXPECT_NEAR(Loss(model->get(), batch.View()), 4 * std::log(2.0), 1e-5);
}

TEST(CpuDenseModelTest, GradientsOfTwoHalvesAddUpToTheWhole) {
  const ModelConfig config = SmallConfig();
  auto model = CreateCpuDenseModel(config);
  ASSERT_THAT(model.status(), IsOk());
  ASSERT_THAT((*model)->SetParameters(InitialDenseParameters(config)), IsOk());
  OwnedBatch whole = RandomBatch(config, 8, 5, 1, 5);
  auto half = [&](int first) {
    OwnedBatch h = whole;
    h.batch_size = 4;
    const int nd = config.num_dense, nf = config.num_fields;
    h.dense.assign(whole.dense.begin() + first * nd,
                   whole.dense.begin() + (first + 4) * nd);
    h.labels.assign(whole.labels.begin() + first,
                    whole.labels.begin() + first + 4);
    h.rows.assign(whole.rows.begin() + first * nf,
                  whole.rows.begin() + (first + 4) * nf);
    h.offsets.resize(4 * nf + 1);
    for (size_t s = 0; s < h.offsets.size(); ++s) h.offsets[s] = s;
    return h;
  };
  const size_t n = (*model)->layout().num_parameters;
  std::vector<float> g_whole(n), g_a(n), g_b(n);
  std::vector<float> r_whole(whole.embeddings.size()), r_a(r_whole.size()),
      r_b(r_whole.size());
  std::vector<float> p8(8), p4(4);
  ASSERT_THAT((*model)
                  ->ForwardBackward(whole.View(), absl::MakeSpan(g_whole),
                                    absl::MakeSpan(r_whole), absl::MakeSpan(p8))
                  .status(),
              IsOk());
  ASSERT_THAT((*model)
                  ->ForwardBackward(half(0).View(), absl::MakeSpan(g_a),
                                    absl::MakeSpan(r_a), absl::MakeSpan(p4))
                  .status(),
              IsOk());
  ASSERT_THAT((*model)
                  ->ForwardBackward(half(4).View(), absl::MakeSpan(g_b),
                                    absl::MakeSpan(r_b), absl::MakeSpan(p4))
                  .status(),
              IsOk());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(g_whole[i], g_a[i] + g_b[i], 1e-4 + 1e-4 * std::abs(g_whole[i]))
        << i;
  }
  for (size_t i = 0; i < r_whole.size(); ++i) {
    EXPECT_NEAR(r_whole[i], r_a[i] + r_b[i], 1e-5) << i;
  }
}

TEST(CpuDenseModelTest, BadBatchesAreRejectedWithTheirReason) {
  const ModelConfig config = SmallConfig();
  auto model = CreateCpuDenseModel(config);
  ASSERT_THAT(model.status(), IsOk());
  const OwnedBatch good = RandomBatch(config, 2, 3, 1, 9);
  std::vector<float> probs(2);

  OwnedBatch bad = good;
  bad.rows[1] = 3;
  EXPECT_THAT((*model)->Predict(bad.View(), absl::MakeSpan(probs)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rows[1] = 3 is not below num_rows = 3")));
  bad = good;
  bad.labels[0] = 0.5f;
  EXPECT_THAT((*model)->Predict(bad.View(), absl::MakeSpan(probs)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label of example 0")));
  bad = good;
  bad.dense.pop_back();
  EXPECT_THAT((*model)->Predict(bad.View(), absl::MakeSpan(probs)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dense")));
  bad = good;
  std::swap(bad.offsets[1], bad.offsets[2]);
  EXPECT_THAT(
      (*model)->Predict(bad.View(), absl::MakeSpan(probs)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("decrease")));
  std::vector<float> short_probs(1);
  EXPECT_THAT(
      (*model)->Predict(good.View(), absl::MakeSpan(short_probs)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("probabilities")));
  EXPECT_THAT((*model)->SetParameters(std::vector<float>(3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CpuDenseModelTest, LogitOffsetsShiftEveryExamplesLogitAndNothingElse) {
  const ModelConfig config = SmallConfig();
  auto model = CreateCpuDenseModel(config);
  ASSERT_THAT(model.status(), IsOk());
  ASSERT_THAT((*model)->SetParameters(InitialDenseParameters(config)), IsOk());
  const OwnedBatch batch = RandomBatch(config, 3, 5, 2, 4);
  std::vector<float> plain(3), shifted(3);
  ASSERT_THAT((*model)->Predict(batch.View(), absl::MakeSpan(plain)), IsOk());
  const std::vector<float> offsets = {1.5f, 0.0f, -2.0f};
  ModelBatch view = batch.View();
  view.logit_offsets = offsets;
  ASSERT_THAT((*model)->Predict(view, absl::MakeSpan(shifted)), IsOk());
  for (int i = 0; i < 3; ++i) {
    const double logit = std::log(plain[i] / (1.0 - plain[i]));
    EXPECT_NEAR(shifted[i], 1.0 / (1.0 + std::exp(-(logit + offsets[i]))), 1e-5)
        << i;
  }
  // Training sees the same probabilities, and the row and dense gradients
  // follow p - y of the shifted logits: with offsets their sum differs.
  std::vector<float> dense((*model)->layout().num_parameters);
  std::vector<float> rows(batch.embeddings.size()), probs(3);
  ASSERT_THAT(
      (*model)->ForwardBackward(view, absl::MakeSpan(dense),
                                absl::MakeSpan(rows), absl::MakeSpan(probs)),
      IsOk());
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(probs[i], shifted[i], 1e-6) << i;
  view.logit_offsets = absl::Span<const float>(offsets.data(), 2);
  EXPECT_THAT(
      (*model)->Predict(view, absl::MakeSpan(shifted)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logit_offsets")));
}

TEST(CpuDenseModelTest, BadConfigsAreRejected) {
  ModelConfig config;
  config.embedding_dim = 0;
  EXPECT_THAT(
      CreateCpuDenseModel(config).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding_dim")));
  config = ModelConfig();
  config.top_hidden = {64, -1};
  EXPECT_THAT(
      CreateCpuDenseModel(config).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_hidden[1]")));
  EXPECT_THAT(ParseInteraction("cross").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cross")));
}

}  // namespace
}  // namespace strata
