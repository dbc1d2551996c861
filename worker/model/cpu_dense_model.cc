// The CPU DenseModel: sgemm for the fully connected layers, loops for the
// pooling, interaction and loss. Activations of the last forward pass are
// kept for the backward pass.

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/model/dense_model.h"
#include "worker/model/internal/cpu_kernels.h"

namespace strata {
namespace {

// C[m x n] = A[m x k] * B[k x n] (+ C if accumulate), all row-major.
void MatMul(int m, int n, int k, const float* a, const float* b, float* c,
            bool accumulate = false) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b,
              n, accumulate ? 1.0f : 0.0f, c, n);
}

// C[k x n] = A[m x k]^T * B[m x n].
void MatMulTransA(int m, int n, int k, const float* a, const float* b,
                  float* c) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, m, 1.0f, a, k, b,
              n, 0.0f, c, n);
}

// C[m x k] = A[m x n] * B[k x n]^T.
void MatMulTransB(int m, int n, int k, const float* a, const float* b,
                  float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, k, n, 1.0f, a, n, b,
              n, 0.0f, c, k);
}

// Layers whose input is stored transposed ([inputs x batch], rows `ld`
// floats apart):
// C[m x n] = A^T * B (+ C if accumulate) with A^T stored [k x m].
void MatMulFromTransposed(int m, int n, int k, const float* a_t, int ld,
                          const float* b, float* c, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, a_t, ld,
              b, n, accumulate ? 1.0f : 0.0f, c, n);
}

// C[k x n] = A^T[k x m] * B[m x n]: the weight gradient.
void MatMulTransposedInput(int m, int n, int k, const float* a_t, int ld,
                           const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, n, m, 1.0f, a_t, ld,
              b, n, 0.0f, c, n);
}

// C^T[k x m] = W[k x n] * G[m x n]^T: the input gradient, transposed.
void MatMulToTransposed(int m, int n, int k, const float* w, const float* g,
                        float* c_t, int ld) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, m, n, 1.0f, w, n, g,
              n, 0.0f, c_t, ld);
}

// grad[k] = 0 where the ReLU's output y[k] is 0. A select rather than a
// branch: about half the outputs are zero, so a branch mispredicts often,
// and the select vectorizes.
void MaskByRelu(const float* y, size_t n, float* grad) {
  for (size_t k = 0; k < n; ++k) grad[k] = y[k] <= 0.0f ? 0.0f : grad[k];
}

class CpuDenseModel final : public DenseModel {
 public:
  explicit CpuDenseModel(const ModelConfig& config)
      : config_(config),
        layout_(MakeDenseLayout(config)),
        parameters_(layout_.num_parameters, 0.0f) {}

  const ModelConfig& config() const override { return config_; }
  const DenseLayout& layout() const override { return layout_; }
  const char* device_name() const override { return "cpu"; }

  absl::Status SetParameters(absl::Span<const float> parameters) override {
    if (parameters.size() != parameters_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("got ", parameters.size(),
                                                     " dense parameters, want ",
                                                     parameters_.size()));
    }
    std::copy(parameters.begin(), parameters.end(), parameters_.begin());
    return absl::OkStatus();
  }

  absl::Status GetParameters(absl::Span<float> parameters) const override {
    if (parameters.size() != parameters_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", parameters.size(),
                       " dense parameters, want ", parameters_.size()));
    }
    std::copy(parameters_.begin(), parameters_.end(), parameters.begin());
    return absl::OkStatus();
  }

  absl::Status Predict(const ModelBatch& batch,
                       absl::Span<float> probabilities) override {
    if (absl::Status s = CheckBatch(batch, probabilities); !s.ok()) return s;
    Forward(batch);
    for (int i = 0; i < batch.batch_size; ++i) {
      probabilities[i] = Sigmoid(logits()[i]);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> ForwardBackward(
      const ModelBatch& batch, absl::Span<float> dense_gradients,
      absl::Span<float> row_gradients,
      absl::Span<float> probabilities) override {
    if (absl::Status s = CheckBatch(batch, probabilities); !s.ok()) return s;
    if (dense_gradients.size() != layout_.num_parameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", dense_gradients.size(),
                       " dense gradients, want ", layout_.num_parameters));
    }
    const size_t row_values =
        static_cast<size_t>(batch.num_rows) * config_.embedding_dim;
    if (row_gradients.size() != row_values) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", row_gradients.size(),
                       " row gradient values, want ", row_values));
    }
    Forward(batch);
    const double loss = LossAndLogitGradient(batch, probabilities);
    Backward(batch, dense_gradients.data(), row_gradients.data());
    return loss;
  }

 private:
  static float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

  absl::Status CheckBatch(const ModelBatch& batch,
                          absl::Span<float> probabilities) const {
    if (absl::Status s = ValidateModelBatch(config_, batch); !s.ok()) return s;
    if (probabilities.size() != static_cast<size_t>(batch.batch_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", probabilities.size(),
                       " probabilities, want ", batch.batch_size));
    }
    return absl::OkStatus();
  }

  int vectors() const { return config_.num_fields + 1; }
  const float* logits() const { return top_out_.back().data(); }

  // Activations y = relu?(x W + b) of `layers`. The first layer's input is
  // x (batch x inputs) or, with x_transposed, x^T (inputs x batch).
  void ForwardMlp(const std::vector<DenseLayer>& layers, int batch,
                  const float* x, bool x_transposed,
                  std::vector<std::vector<float>>* outputs) {
    outputs->resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      const DenseLayer& layer = layers[l];
      std::vector<float>& y = (*outputs)[l];
      y.resize(static_cast<size_t>(batch) * layer.outputs);
      const float* w = parameters_.data() + layer.weight_offset;
      const float* b = parameters_.data() + layer.bias_offset;
      for (int i = 0; i < batch; ++i) {
        std::memcpy(&y[static_cast<size_t>(i) * layer.outputs], b,
                    sizeof(float) * layer.outputs);
      }
      if (l == 0 && x_transposed) {
        MatMulFromTransposed(batch, layer.outputs, layer.inputs, x,
                             static_cast<int>(stride_), w, y.data(), true);
      } else {
        MatMul(batch, layer.outputs, layer.inputs, x, w, y.data(), true);
      }
      if (layer.relu) {
        for (float& v : y) v = std::max(v, 0.0f);
      }
      x = y.data();
    }
  }

  void Forward(const ModelBatch& batch) {
    const int n = batch.batch_size;
    ForwardMlp(layout_.bottom, n, batch.dense.data(), false, &bottom_out_);
    PoolEmbeddings(batch);
    Interact(n);
    ForwardMlp(layout_.top, n, interaction_.data(), true, &top_out_);
    if (!batch.logit_offsets.empty()) {
      float* logits = top_out_.back().data();
      for (int i = 0; i < n; ++i) logits[i] += batch.logit_offsets[i];
    }
  }

  // vectors_ holds the (F + 1) x dim vectors of every example feature-major
  // (row k = value k of every example), so that the interaction's loops run
  // over examples and vectorize: rows 0..dim-1 the bottom MLP's output, then
  // the pooled fields.
  void PoolEmbeddings(const ModelBatch& batch) {
    const int n = batch.batch_size;
    const int dim = config_.embedding_dim;
    const int fields = config_.num_fields;
    stride_ = model_internal::FeatureMajorStride(n);
    const size_t stride = stride_;
    // Every row's first n columns are written below; the kernels read the
    // padding columns but their results there are never used, so the
    // buffer is not cleared (a 27 x 16 x 1040 batch is 1.8 MB a step).
    vectors_.resize(static_cast<size_t>(vectors()) * dim * stride);
    model_internal::TransposeFloats(bottom_out_.back().data(), dim, n, dim,
                                    vectors_.data(), stride);
    // Pooled kTileExamples examples at a time into tile_ (example-major),
    // then each row's piece of the tile written whole: written straight into
    // the feature-major rows, each value was a store to its own cache line.
    tile_.resize(static_cast<size_t>(kTileExamples) * fields * dim);
    for (int first = 0; first < n; first += kTileExamples) {
      const int count = std::min(kTileExamples, n - first);
      for (int j = 0; j < count; ++j) {
        for (int f = 0; f < fields; ++f) {
          float* pooled = TileVector(j, f);
          std::fill(pooled, pooled + dim, 0.0f);
          const size_t slot = static_cast<size_t>(first + j) * fields + f;
          const uint32_t begin = batch.offsets[slot];
          const uint32_t end = batch.offsets[slot + 1];
          for (uint32_t k = begin; k < end; ++k) {
            PrefetchRowAhead</*rw=*/0>(batch, batch.embeddings.data(), k);
            const float* row = batch.embeddings.data() +
                               static_cast<size_t>(batch.rows[k]) * dim;
            for (int d = 0; d < dim; ++d) pooled[d] += row[d];
          }
          const float scale = PoolingScale(begin, end);
          if (scale == 1.0f) continue;
          for (int d = 0; d < dim; ++d) pooled[d] *= scale;
        }
      }
      for (int f = 0; f < fields; ++f) {
        float* out = &vectors_[(f + 1) * dim * stride + first];
        // The next tile's piece of each row, on its own cache line and
        // within the row (its stride has a tile of padding): too many rows
        // are walked at once for the hardware to fetch ahead.
        for (int d = 0; d < dim; ++d) {
          __builtin_prefetch(out + d * stride + kTileExamples, /*rw=*/1);
        }
        model_internal::TransposeFloats(TileVector(0, f), fields * dim, count,
                                        dim, out, stride);
      }
    }
  }

  // The row of key occurrence k + kRowsAhead of `rows` (dim floats per
  // row), fetched while occurrence k is summed: the rows a batch's slots
  // name are scattered over all its pulled rows (a megabyte at the default
  // shape), past the L1 and often the L2 cache.
  static constexpr uint32_t kRowsAhead = 16;
  template <int kWrite>
  void PrefetchRowAhead(const ModelBatch& batch, const float* rows,
                        uint32_t k) const {
    if (k + kRowsAhead >= batch.rows.size()) return;
    __builtin_prefetch(rows + static_cast<size_t>(batch.rows[k + kRowsAhead]) *
                                  config_.embedding_dim,
                       kWrite);
  }

  // Examples pooled or scattered at once: a tile of the default model's 26
  // fields x 16 floats is 26 KB, and a row's piece of it one cache line.
  static constexpr int kTileExamples = 16;

  // What a slot's pooled sum is multiplied by, forward and backward: 1 for
  // sum pooling, 1 / rows for mean pooling over more than one row.
  float PoolingScale(uint32_t begin, uint32_t end) const {
    return config_.pooling == Pooling::kMean && end - begin > 1
               ? 1.0f / (end - begin)
               : 1.0f;
  }

  // Field f of example j of the tile: dim floats.
  float* TileVector(int j, int f) {
    return &tile_[(static_cast<size_t>(j) * config_.num_fields + f) *
                  config_.embedding_dim];
  }

  // interaction_ (width x batch, feature-major): the vectors themselves
  // (concat), or the bottom output and the pairwise dots (dot).
  void Interact(int n) {
    const int dim = config_.embedding_dim;
    if (config_.interaction == Interaction::kConcat) {
      interaction_ = vectors_;
      return;
    }
    const size_t stride = stride_;
    // Filled whole below: the bottom output's rows, then one row per pair.
    interaction_.resize(layout_.interaction_width * stride);
    std::copy(vectors_.begin(), vectors_.begin() + dim * stride,
              interaction_.begin());
    model_internal::DotInteractionBatch(vectors_.data(), vectors(), dim, n,
                                        stride_,
                                        interaction_.data() + dim * stride);
  }

  // Summed cross-entropy; logit_grad_ = p - y (gradient of the summed loss).
  double LossAndLogitGradient(const ModelBatch& batch,
                              absl::Span<float> probabilities) {
    double loss = 0;
    logit_grad_.resize(batch.batch_size);
    for (int i = 0; i < batch.batch_size; ++i) {
      const float x = logits()[i];
      const float y = batch.labels[i];
      // max(x, 0) - x y + log(1 + e^-|x|): stable for large |x|.
      loss += std::max(x, 0.0f) - x * y + std::log1p(std::exp(-std::abs(x)));
      probabilities[i] = Sigmoid(x);
      logit_grad_[i] = probabilities[i] - y;
    }
    return loss;
  }

  // Back through `layers` given d(output of the last layer) in `grad`
  // (overwritten); writes parameter gradients and, if `input_grad` is not
  // null, d(input) of the first layer, transposed like its input when
  // input_transposed.
  void BackwardMlp(const std::vector<DenseLayer>& layers, int batch,
                   const float* input, bool input_transposed,
                   const std::vector<std::vector<float>>& outputs,
                   std::vector<float>* grad, float* dense_gradients,
                   std::vector<float>* input_grad) {
    for (size_t l = layers.size(); l-- > 0;) {
      const DenseLayer& layer = layers[l];
      const std::vector<float>& y = outputs[l];
      if (layer.relu) MaskByRelu(y.data(), grad->size(), grad->data());
      const bool transposed = l == 0 && input_transposed;
      const float* x = l == 0 ? input : outputs[l - 1].data();
      float* dw = dense_gradients + layer.weight_offset;
      if (transposed) {
        MatMulTransposedInput(batch, layer.outputs, layer.inputs, x,
                              static_cast<int>(stride_), grad->data(), dw);
      } else {
        MatMulTransA(batch, layer.outputs, layer.inputs, x, grad->data(), dw);
      }
      float* db = dense_gradients + layer.bias_offset;
      std::fill(db, db + layer.outputs, 0.0f);
      for (int i = 0; i < batch; ++i) {
        const float* g = grad->data() + static_cast<size_t>(i) * layer.outputs;
        for (int o = 0; o < layer.outputs; ++o) db[o] += g[o];
      }
      if (l == 0 && input_grad == nullptr) break;
      std::vector<float>& next = l == 0 ? *input_grad : scratch_;
      next.resize(static_cast<size_t>(transposed ? stride_ : batch) *
                  layer.inputs);
      const float* w = parameters_.data() + layer.weight_offset;
      if (transposed) {
        MatMulToTransposed(batch, layer.outputs, layer.inputs, w, grad->data(),
                           next.data(), static_cast<int>(stride_));
      } else {
        MatMulTransB(batch, layer.outputs, layer.inputs, grad->data(), w,
                     next.data());
      }
      if (l > 0) grad->swap(scratch_);
    }
  }

  // d(vectors), feature-major like vectors_, from d(interaction_).
  void BackwardInteraction(int n) {
    const int dim = config_.embedding_dim;
    if (config_.interaction == Interaction::kConcat) {
      vector_grad_ = interaction_grad_;
      return;
    }
    const size_t stride = stride_;
    // Not zeroed: the kernel writes every row (a fill of 1.8 MB a step at
    // the default shape was 3% of the worker's CPU).
    vector_grad_.resize(vectors() * dim * stride);
    model_internal::DotInteractionBackwardBatch(
        vectors_.data(), interaction_grad_.data() + dim * stride, vectors(),
        dim, n, stride_, vector_grad_.data());
    // The bottom output also went into the top MLP's input as it is.
    for (size_t i = 0; i < dim * stride; ++i) {
      vector_grad_[i] += interaction_grad_[i];
    }
  }

  void ScatterRowGradients(const ModelBatch& batch, float* row_gradients) {
    const int n = batch.batch_size;
    const int dim = config_.embedding_dim;
    const int fields = config_.num_fields;
    std::fill(row_gradients,
              row_gradients + static_cast<size_t>(batch.num_rows) * dim, 0.0f);
    // A tile's vectors are read row piece by row piece (as PoolEmbeddings
    // writes them) and added in the order of examples, then fields, so
    // that a key in several slots sums its gradients in the same order.
    tile_.resize(static_cast<size_t>(kTileExamples) * fields * dim);
    for (int first = 0; first < n; first += kTileExamples) {
      const int count = std::min(kTileExamples, n - first);
      for (int f = 0; f < fields; ++f) {
        const float* in = &vector_grad_[(f + 1) * dim * stride_ + first];
        // As in PoolEmbeddings.
        for (int d = 0; d < dim; ++d) {
          __builtin_prefetch(in + d * stride_ + kTileExamples);
        }
        model_internal::TransposeFloats(in, stride_, dim, count,
                                        TileVector(0, f), fields * dim);
      }
      for (int j = 0; j < count; ++j) {
        for (int f = 0; f < fields; ++f) {
          const size_t slot = static_cast<size_t>(first + j) * fields + f;
          const uint32_t begin = batch.offsets[slot];
          const uint32_t end = batch.offsets[slot + 1];
          const float scale = PoolingScale(begin, end);
          const float* g = TileVector(j, f);
          for (uint32_t k = begin; k < end; ++k) {
            PrefetchRowAhead</*rw=*/1>(batch, row_gradients, k);
            float* out =
                row_gradients + static_cast<size_t>(batch.rows[k]) * dim;
            if (scale == 1.0f) {
              for (int d = 0; d < dim; ++d) out[d] += g[d];
            } else {
              for (int d = 0; d < dim; ++d) out[d] += scale * g[d];
            }
          }
        }
      }
    }
  }

  void Backward(const ModelBatch& batch, float* dense_gradients,
                float* row_gradients) {
    const int n = batch.batch_size;
    const int dim = config_.embedding_dim;
    std::vector<float> grad(logit_grad_);
    BackwardMlp(layout_.top, n, interaction_.data(), true, top_out_, &grad,
                dense_gradients, &interaction_grad_);
    BackwardInteraction(n);
    ScatterRowGradients(batch, row_gradients);
    // d(bottom output): the first dim rows of vector_grad_, transposed back.
    bottom_grad_.resize(static_cast<size_t>(n) * dim);
    model_internal::TransposeFloats(vector_grad_.data(), stride_, dim, n,
                                    bottom_grad_.data(), dim);
    BackwardMlp(layout_.bottom, n, batch.dense.data(), false, bottom_out_,
                &bottom_grad_, dense_gradients, nullptr);
  }

  const ModelConfig config_;
  const DenseLayout layout_;
  std::vector<float> parameters_;
  // Forward state of the last batch.
  std::vector<std::vector<float>> bottom_out_;
  std::vector<std::vector<float>> top_out_;
  std::vector<float> vectors_;      // (F + 1) x dim x batch
  std::vector<float> interaction_;  // interaction_width x batch
  std::vector<float> tile_;         // kTileExamples x F x dim, example-major
  size_t stride_ = 0;               // FeatureMajorStride of the last batch
  // Backward scratch.
  std::vector<float> logit_grad_;
  std::vector<float> interaction_grad_;
  std::vector<float> vector_grad_;
  std::vector<float> bottom_grad_;
  std::vector<float> scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DenseModel>> CreateCpuDenseModel(
    const ModelConfig& config) {
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  return std::unique_ptr<DenseModel>(new CpuDenseModel(config));
}

}  // namespace strata
