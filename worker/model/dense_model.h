#ifndef STRATA_WORKER_MODEL_DENSE_MODEL_H_
#define STRATA_WORKER_MODEL_DENSE_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/model_config.h"

namespace strata {

// One batch as the dense model sees it. The embedding rows of the batch's
// unique keys are pulled once into `embeddings` (num_rows x embedding_dim);
// example i's field f pools rows rows[k] for k in
// [offsets[i * num_fields + f], offsets[i * num_fields + f + 1]).
// Single-hot data (Criteo) has exactly one row per field.
struct ModelBatch {
  int batch_size = 0;
  absl::Span<const float> dense;       // batch_size x num_dense
  absl::Span<const float> labels;      // batch_size; 0 or 1
  absl::Span<const uint32_t> offsets;  // batch_size * num_fields + 1
  absl::Span<const uint32_t> rows;     // offsets.back() indices < num_rows
  absl::Span<const float> embeddings;  // num_rows x embedding_dim
  int num_rows = 0;
  // Added to each example's logit before the sigmoid (batch_size values),
  // or empty: the wide (first-order) term the trainer computes from its own
  // table. The logit's gradient p - y is then also the offset's.
  absl::Span<const float> logit_offsets;
};

// INVALID_ARGUMENT naming what does not fit `config` (sizes, an offset out
// of order, a row index out of range, a label other than 0/1).
absl::Status ValidateModelBatch(const ModelConfig& config,
                                const ModelBatch& batch);

// The dense part of the model: MLPs and interaction, forward and backward.
// The parameters are a copy of the flat vector in MakeDenseLayout order; the
// dense optimizer runs outside (DenseOptimizer) on the host copy, so that
// ranks allreduce and checkpoint one plain vector whatever the device.
// Not thread-safe: one model per training thread.
//
//   STRATA_ASSIGN_OR_RETURN(auto model, CreateCpuDenseModel(config));
//   model->SetParameters(InitialDenseParameters(config));
//   STRATA_ASSIGN_OR_RETURN(double loss,
//       model->ForwardBackward(batch, dense_grad, row_grad, probs));
class DenseModel {
 public:
  virtual ~DenseModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const DenseLayout& layout() const = 0;
  // "cpu" or "cuda:N".
  virtual const char* device_name() const = 0;

  // INVALID_ARGUMENT if the size is not layout().num_parameters.
  virtual absl::Status SetParameters(absl::Span<const float> parameters) = 0;
  virtual absl::Status GetParameters(absl::Span<float> parameters) const = 0;

  // Forward only: probabilities[i] = sigmoid(logit of example i).
  virtual absl::Status Predict(const ModelBatch& batch,
                               absl::Span<float> probabilities) = 0;

  // Forward and backward over the batch. Gradients are of the SUMMED loss
  // (not the mean), so that ranks can add them and divide by the global
  // example count: dense_gradients (layout().num_parameters) and
  // row_gradients (num_rows x embedding_dim, one per pulled row, summed over
  // its occurrences). Fills probabilities (batch_size) and returns the
  // summed cross-entropy. INVALID_ARGUMENT for a batch that does not fit.
  virtual absl::StatusOr<double> ForwardBackward(
      const ModelBatch& batch, absl::Span<float> dense_gradients,
      absl::Span<float> row_gradients, absl::Span<float> probabilities) = 0;
};

// The CPU model: matrix products through BLAS (OpenBLAS sgemm), the rest in
// plain loops. INVALID_ARGUMENT for a bad config.
absl::StatusOr<std::unique_ptr<DenseModel>> CreateCpuDenseModel(
    const ModelConfig& config);

// The CUDA model on device `device` (cuBLAS and kernels); built only when
// STRATA_WITH_CUDA. FAILED_PRECONDITION when no GPU is usable.
absl::StatusOr<std::unique_ptr<DenseModel>> CreateCudaDenseModel(
    const ModelConfig& config, int device);

// Whether this build has the CUDA model at all.
bool CudaModelCompiledIn();

}  // namespace strata

#endif  // STRATA_WORKER_MODEL_DENSE_MODEL_H_
