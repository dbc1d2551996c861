// The CUDA dense model against the CPU model (the reference, itself checked
// against finite differences in tests/worker/model): the same config,
// parameters and batch must give the same probabilities, loss, dense
// gradients and row gradients up to float rounding. Each config isolates
// pieces of the model: the interactions (dot, concat), the poolings (sum,
// mean) with single- and multi-hot fields, empty fields, deep MLPs. Needs a
// GPU; run through tests/gpu/check.sh.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
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

// check.sh sets this, with CUDA_VISIBLE_DEVICES empty, for the one test of
// the no-GPU path.
bool ExpectNoGpu() {
  const char* value = std::getenv("STRATA_EXPECT_NO_GPU");
  return value != nullptr && std::string(value) == "1";
}

// A batch with its own storage.
struct OwnedBatch {
  std::vector<float> dense, labels, embeddings;
  std::vector<uint32_t> offsets, rows;
  int batch_size = 0;
  int num_rows = 0;

  ModelBatch View() const {
    ModelBatch batch;
    batch.batch_size = batch_size;
    batch.dense = dense;
    batch.labels = labels;
    batch.offsets = offsets;
    batch.rows = rows;
    batch.embeddings = embeddings;
    batch.num_rows = num_rows;
    return batch;
  }
};

// max_hot == 1: one row per field; otherwise 0..max_hot rows (so some fields
// are empty).
OwnedBatch RandomBatch(const ModelConfig& config, int batch_size, int num_rows,
                       int max_hot, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  OwnedBatch batch;
  batch.batch_size = batch_size;
  batch.num_rows = num_rows;
  for (int i = 0; i < batch_size * config.num_dense; ++i) {
    batch.dense.push_back(unit(rng));
  }
  for (int i = 0; i < batch_size; ++i) {
    batch.labels.push_back(static_cast<float>(rng() % 2));
  }
  for (int i = 0; i < num_rows * config.embedding_dim; ++i) {
    batch.embeddings.push_back(unit(rng) - 0.5f);
  }
  batch.offsets.push_back(0);
  for (int s = 0; s < batch_size * config.num_fields; ++s) {
    const int hot = max_hot == 1 ? 1 : static_cast<int>(rng() % (max_hot + 1));
    for (int k = 0; k < hot; ++k) batch.rows.push_back(rng() % num_rows);
    batch.offsets.push_back(batch.rows.size());
  }
  return batch;
}

// Small enough that few pre-activations of a 1024 batch land within
// rounding of ReLU's kink (where the two models may legitimately disagree).
ModelConfig TestConfig(Interaction interaction, Pooling pooling) {
  ModelConfig config;
  config.num_dense = 5;
  config.num_fields = 6;
  config.embedding_dim = 8;
  config.bottom_hidden = {16};
  config.top_hidden = {32, 16};
  config.interaction = interaction;
  config.pooling = pooling;
  config.seed = 3;
  return config;
}

// The initial parameters plus noise, so that the biases are not zero.
std::vector<float> TestParameters(const ModelConfig& config) {
  std::vector<float> parameters = InitialDenseParameters(config);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> noise(-0.1f, 0.1f);
  for (float& p : parameters) p += noise(rng);
  return parameters;
}

// Equal up to float rounding of sums: a relative 1e-4 of the value plus a
// little of the largest value (for values that are sums that cancel).
void ExpectClose(absl::Span<const float> gpu, absl::Span<const float> cpu,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double largest = 0;
  for (float c : cpu) largest = std::max(largest, std::abs(double{c}));
  size_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double tolerance = 1e-4 * std::abs(cpu[i]) + 3e-5 * largest + 1e-7;
    if (!(std::abs(double{gpu[i]} - cpu[i]) <= tolerance) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << ", cpu "
                    << cpu[i] << " (largest " << largest << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size()
                     << " values differ";
}

// Runs Predict and ForwardBackward of both models on `batch`.
void ExpectSameResults(DenseModel* cpu, DenseModel* gpu,
                       const OwnedBatch& batch) {
  const size_t n = batch.batch_size;
  std::vector<float> cpu_probs(n), gpu_probs(n);
  ASSERT_THAT(cpu->Predict(batch.View(), absl::MakeSpan(cpu_probs)), IsOk());
  ASSERT_THAT(gpu->Predict(batch.View(), absl::MakeSpan(gpu_probs)), IsOk());
  ExpectClose(gpu_probs, cpu_probs, "Predict probabilities");

  const size_t params = cpu->layout().num_parameters;
  std::vector<float> cpu_dense(params), gpu_dense(params, NAN);
  std::vector<float> cpu_rows(batch.embeddings.size());
  std::vector<float> gpu_rows(batch.embeddings.size(), NAN);
  std::fill(gpu_probs.begin(), gpu_probs.end(), NAN);
  auto cpu_loss =
      cpu->ForwardBackward(batch.View(), absl::MakeSpan(cpu_dense),
                           absl::MakeSpan(cpu_rows), absl::MakeSpan(cpu_probs));
  auto gpu_loss =
      gpu->ForwardBackward(batch.View(), absl::MakeSpan(gpu_dense),
                           absl::MakeSpan(gpu_rows), absl::MakeSpan(gpu_probs));
  ASSERT_THAT(cpu_loss.status(), IsOk());
  ASSERT_THAT(gpu_loss.status(), IsOk());
  EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-5 * std::abs(*cpu_loss) + 1e-6);
  ExpectClose(gpu_probs, cpu_probs, "ForwardBackward probabilities");
  ExpectClose(gpu_dense, cpu_dense, "dense gradients");
  ExpectClose(gpu_rows, cpu_rows, "row gradients");
}

// One pair of models through batches of 1, 7, 1024 and 7 examples (so the
// device buffers grow and are then reused).
void ExpectSameAsCpu(const ModelConfig& config, int max_hot,
                     std::vector<int> batch_sizes = {1, 7, 1024, 7},
                     int device = 0) {
  auto cpu = CreateCpuDenseModel(config);
  ASSERT_THAT(cpu.status(), IsOk());
  auto gpu = CreateCudaDenseModel(config, device);
  ASSERT_THAT(gpu.status(), IsOk());
  const std::vector<float> parameters = TestParameters(config);
  ASSERT_THAT((*cpu)->SetParameters(parameters), IsOk());
  ASSERT_THAT((*gpu)->SetParameters(parameters), IsOk());
  uint32_t seed = 1;
  for (int n : batch_sizes) {
    SCOPED_TRACE(absl::StrCat(InteractionName(config.interaction), ", ",
                              PoolingName(config.pooling), ", max_hot ",
                              max_hot, ", batch ", n));
    const int num_rows = std::clamp(n * config.num_fields / 2, 1, 500);
    const OwnedBatch batch = RandomBatch(config, n, num_rows, max_hot, ++seed);
    ExpectSameResults(cpu->get(), gpu->get(), batch);
  }
}

TEST(CudaDenseModelTest, DotSingleHotSumMatchesCpu) {
  ExpectSameAsCpu(TestConfig(Interaction::kDot, Pooling::kSum), 1);
}

TEST(CudaDenseModelTest, ConcatSingleHotSumMatchesCpu) {
  ExpectSameAsCpu(TestConfig(Interaction::kConcat, Pooling::kSum), 1);
}

TEST(CudaDenseModelTest, DotMultiHotSumMatchesCpu) {
  ExpectSameAsCpu(TestConfig(Interaction::kDot, Pooling::kSum), 3);
}

TEST(CudaDenseModelTest, DotMultiHotMeanMatchesCpu) {
  ExpectSameAsCpu(TestConfig(Interaction::kDot, Pooling::kMean), 3);
}

TEST(CudaDenseModelTest, ConcatMultiHotMeanMatchesCpu) {
  ExpectSameAsCpu(TestConfig(Interaction::kConcat, Pooling::kMean), 4);
}

TEST(CudaDenseModelTest, DefaultDlrmShapeMatchesCpu) {
  ExpectSameAsCpu(ModelConfig(), 1, {7, 256});
}

TEST(CudaDenseModelTest, DeepMlpsAndWideEmbeddingsMatchCpu) {
  ModelConfig config = TestConfig(Interaction::kDot, Pooling::kSum);
  config.embedding_dim = 32;
  config.num_fields = 3;
  config.bottom_hidden = {24, 12, 40};
  config.top_hidden = {48, 24, 12};
  ExpectSameAsCpu(config, 2, {1, 7, 300});
}

TEST(CudaDenseModelTest, BatchWithoutAnyRowsMatchesCpu) {
  for (Interaction interaction : {Interaction::kDot, Interaction::kConcat}) {
    const ModelConfig config = TestConfig(interaction, Pooling::kMean);
    OwnedBatch batch = RandomBatch(config, 5, 1, 1, 4);
    batch.rows.clear();
    std::fill(batch.offsets.begin(), batch.offsets.end(), 0u);
    batch.embeddings.clear();
    batch.num_rows = 0;
    auto cpu = CreateCpuDenseModel(config);
    auto gpu = CreateCudaDenseModel(config, 0);
    ASSERT_THAT(cpu.status(), IsOk());
    ASSERT_THAT(gpu.status(), IsOk());
    const std::vector<float> parameters = TestParameters(config);
    ASSERT_THAT((*cpu)->SetParameters(parameters), IsOk());
    ASSERT_THAT((*gpu)->SetParameters(parameters), IsOk());
    ExpectSameResults(cpu->get(), gpu->get(), batch);
  }
}

TEST(CudaDenseModelTest, LastDeviceMatchesCpu) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, 1);
  auto gpu = CreateCudaDenseModel(ModelConfig(), devices - 1);
  ASSERT_THAT(gpu.status(), IsOk());
  EXPECT_EQ(std::string((*gpu)->device_name()),
            absl::StrCat("cuda:", devices - 1));
  ExpectSameAsCpu(TestConfig(Interaction::kDot, Pooling::kSum), 2, {7},
                  devices - 1);
}

TEST(CudaDenseModelTest, ParametersStartAtZeroAndRoundTripExactly) {
  const ModelConfig config = ModelConfig();
  auto gpu = CreateCudaDenseModel(config, 0);
  ASSERT_THAT(gpu.status(), IsOk());
  EXPECT_TRUE(CudaModelCompiledIn());
  EXPECT_EQ(std::string((*gpu)->device_name()), "cuda:0");
  const size_t n = (*gpu)->layout().num_parameters;
  std::vector<float> got(n, 1.0f);
  ASSERT_THAT((*gpu)->GetParameters(absl::MakeSpan(got)), IsOk());
  EXPECT_EQ(got, std::vector<float>(n, 0.0f));

  const std::vector<float> parameters = TestParameters(config);
  ASSERT_THAT((*gpu)->SetParameters(parameters), IsOk());
  ASSERT_THAT((*gpu)->GetParameters(absl::MakeSpan(got)), IsOk());
  EXPECT_EQ(got, parameters);
}

TEST(CudaDenseModelTest, BadInputsAreRejectedLikeOnTheCpu) {
  const ModelConfig config = TestConfig(Interaction::kDot, Pooling::kSum);
  auto gpu = CreateCudaDenseModel(config, 0);
  ASSERT_THAT(gpu.status(), IsOk());
  DenseModel& model = **gpu;
  const OwnedBatch good = RandomBatch(config, 2, 3, 1, 9);
  std::vector<float> probs(2);

  OwnedBatch bad = good;
  bad.rows[1] = 3;
  EXPECT_THAT(model.Predict(bad.View(), absl::MakeSpan(probs)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rows[1] = 3 is not below num_rows = 3")));
  bad = good;
  bad.labels[0] = 0.5f;
  EXPECT_THAT(model.Predict(bad.View(), absl::MakeSpan(probs)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label of example 0")));
  std::vector<float> short_probs(1);
  EXPECT_THAT(
      model.Predict(good.View(), absl::MakeSpan(short_probs)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("probabilities")));

  std::vector<float> dense(model.layout().num_parameters);
  std::vector<float> rows(good.embeddings.size());
  std::vector<float> short_dense(dense.size() - 1);
  std::vector<float> short_rows(rows.size() - 1);
  EXPECT_THAT(model
                  .ForwardBackward(good.View(), absl::MakeSpan(short_dense),
                                   absl::MakeSpan(rows), absl::MakeSpan(probs))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dense gradients")));
  EXPECT_THAT(
      model
          .ForwardBackward(good.View(), absl::MakeSpan(dense),
                           absl::MakeSpan(short_rows), absl::MakeSpan(probs))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("row gradient values")));
  EXPECT_THAT(model.SetParameters(std::vector<float>(3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<float> three(3);
  EXPECT_THAT(model.GetParameters(absl::MakeSpan(three)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // The model still works after the rejections.
  EXPECT_THAT(model
                  .ForwardBackward(good.View(), absl::MakeSpan(dense),
                                   absl::MakeSpan(rows), absl::MakeSpan(probs))
                  .status(),
              IsOk());
}

TEST(CudaDenseModelTest, BadConfigsAndDevicesAreRejected) {
  ModelConfig config;
  config.embedding_dim = 0;
  EXPECT_THAT(
      CreateCudaDenseModel(config, 0).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding_dim")));
  EXPECT_THAT(CreateCudaDenseModel(ModelConfig(), 1000).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("device 1000 does not exist")));
  EXPECT_THAT(CreateCudaDenseModel(ModelConfig(), -1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CudaDenseModelTest, WithoutGpuCreateFailsWithFailedPrecondition) {
  if (!ExpectNoGpu()) {
    GTEST_SKIP() << "runs with STRATA_EXPECT_NO_GPU=1 CUDA_VISIBLE_DEVICES=";
  }
  EXPECT_THAT(CreateCudaDenseModel(ModelConfig(), 0).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no usable CUDA device")));
}

}  // namespace
}  // namespace strata
