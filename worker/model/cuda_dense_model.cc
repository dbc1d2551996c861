// The CUDA DenseModel: the CPU model's math (cpu_dense_model.cc) with the
// parameters, the batch and the activations in device memory. The fully
// connected layers are cuBLAS sgemm calls, the rest one kernel per piece
// (internal/cuda_dense_kernels.cu). Host code only, so g++ compiles it.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/dense_model.h"
#include "worker/model/internal/cuda_dense_kernels.h"
#include "worker/model/internal/cuda_status.h"
#include "worker/model/internal/device_buffer.h"
#include "worker/model/internal/row_major_blas.h"

namespace strata {
namespace {

using model_internal::DeviceBuffer;
using model_internal::PoolingShape;

// Copies host values into `device`, growing it as needed.
template <typename T>
absl::Status CopyToDevice(absl::Span<const T> host, DeviceBuffer<T>* device,
                          cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(device->Reserve(host.size()));
  if (host.empty()) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device->data(), host.data(),
                                              host.size() * sizeof(T),
                                              cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

absl::Status CopyToHost(const float* device, absl::Span<float> host,
                        cudaStream_t stream) {
  if (host.empty()) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), device,
                                              host.size() * sizeof(float),
                                              cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}

class CudaDenseModel final : public DenseModel {
 public:
  CudaDenseModel(const ModelConfig& config, int device)
      : config_(config),
        layout_(MakeDenseLayout(config)),
        device_(device),
        device_name_(absl::StrCat("cuda:", device)),
        bottom_out_(layout_.bottom.size()),
        top_out_(layout_.top.size()) {}

  CudaDenseModel(const CudaDenseModel&) = delete;
  CudaDenseModel& operator=(const CudaDenseModel&) = delete;

  ~CudaDenseModel() override {
    // The buffers are freed after this body, on this device.
    cudaSetDevice(device_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Creates the stream and cuBLAS handle and the parameters (zeros).
  absl::Status Init() {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
    // No TF32: the products stay in float, as on the CPU.
    STRATA_CUBLAS_RETURN_IF_ERROR(
        cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    const size_t n = layout_.num_parameters;
    STRATA_RETURN_IF_ERROR(parameters_.Reserve(n));
    STRATA_RETURN_IF_ERROR(dense_gradients_.Reserve(n));
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(parameters_.data(), 0, n * sizeof(float), stream_));
    if (config_.interaction == Interaction::kDot) {
      std::vector<int> first, second;
      for (int a = 0; a < vectors(); ++a) {
        for (int b = a + 1; b < vectors(); ++b) {
          first.push_back(a);
          second.push_back(b);
        }
      }
      STRATA_RETURN_IF_ERROR(CopyToDevice<int>(first, &pair_first_, stream_));
      STRATA_RETURN_IF_ERROR(CopyToDevice<int>(second, &pair_second_, stream_));
    }
    return Synchronize();
  }

  const ModelConfig& config() const override { return config_; }
  const DenseLayout& layout() const override { return layout_; }
  const char* device_name() const override { return device_name_.c_str(); }

  absl::Status SetParameters(absl::Span<const float> parameters) override {
    if (parameters.size() != layout_.num_parameters) {
      return absl::InvalidArgumentError(absl::StrCat("got ", parameters.size(),
                                                     " dense parameters, want ",
                                                     layout_.num_parameters));
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    STRATA_RETURN_IF_ERROR(CopyToDevice(parameters, &parameters_, stream_));
    return Synchronize();
  }

  absl::Status GetParameters(absl::Span<float> parameters) const override {
    if (parameters.size() != layout_.num_parameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", parameters.size(),
                       " dense parameters, want ", layout_.num_parameters));
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    STRATA_RETURN_IF_ERROR(CopyToHost(parameters_.data(), parameters, stream_));
    return Synchronize();
  }

  absl::Status Predict(const ModelBatch& batch,
                       absl::Span<float> probabilities) override {
    STRATA_RETURN_IF_ERROR(CheckBatch(batch, probabilities));
    STRATA_RETURN_IF_ERROR(Upload(batch));
    STRATA_RETURN_IF_ERROR(Forward(batch.batch_size));
    STRATA_RETURN_IF_ERROR(AddLogitOffsets(batch));
    STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchSigmoid(
        logits(), batch.batch_size, probabilities_.data(), stream_));
    STRATA_RETURN_IF_ERROR(
        CopyToHost(probabilities_.data(), probabilities, stream_));
    return Synchronize();
  }

  absl::StatusOr<double> ForwardBackward(
      const ModelBatch& batch, absl::Span<float> dense_gradients,
      absl::Span<float> row_gradients,
      absl::Span<float> probabilities) override {
    STRATA_RETURN_IF_ERROR(CheckBatch(batch, probabilities));
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
    const int n = batch.batch_size;
    STRATA_RETURN_IF_ERROR(Upload(batch));
    STRATA_RETURN_IF_ERROR(Forward(n));
    STRATA_RETURN_IF_ERROR(AddLogitOffsets(batch));
    // The logit gradients seed the backward pass in grad_[0].
    STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchLogisticLoss(
        logits(), labels_.data(), n, probabilities_.data(), losses_.data(),
        grad_[0].data(), stream_));
    STRATA_RETURN_IF_ERROR(Backward(batch));
    STRATA_RETURN_IF_ERROR(
        CopyToHost(probabilities_.data(), probabilities, stream_));
    host_losses_.resize(n);
    STRATA_RETURN_IF_ERROR(
        CopyToHost(losses_.data(), absl::MakeSpan(host_losses_), stream_));
    STRATA_RETURN_IF_ERROR(
        CopyToHost(dense_gradients_.data(), dense_gradients, stream_));
    STRATA_RETURN_IF_ERROR(
        CopyToHost(row_gradients_.data(), row_gradients, stream_));
    STRATA_RETURN_IF_ERROR(Synchronize());
    // Summed in double in example order, as the CPU model does.
    double loss = 0;
    for (float example_loss : host_losses_) loss += example_loss;
    return loss;
  }

 private:
  int vectors() const { return config_.num_fields + 1; }
  int pairs() const { return vectors() * (vectors() - 1) / 2; }
  bool dot() const { return config_.interaction == Interaction::kDot; }
  const float* logits() const { return top_out_.back().data(); }
  // The top MLP's input: for kConcat the vectors themselves.
  const float* interaction() const {
    return dot() ? interaction_.data() : vectors_.data();
  }
  float* weights(const DenseLayer& layer) const {
    return parameters_.data() + layer.weight_offset;
  }

  absl::Status Synchronize() const {
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status CheckBatch(const ModelBatch& batch,
                          absl::Span<float> probabilities) const {
    STRATA_RETURN_IF_ERROR(ValidateModelBatch(config_, batch));
    if (probabilities.size() != static_cast<size_t>(batch.batch_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("room for ", probabilities.size(),
                       " probabilities, want ", batch.batch_size));
    }
    return absl::OkStatus();
  }

  // Selects the device, copies the batch in and sizes the buffers for it.
  absl::Status Upload(const ModelBatch& batch) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    STRATA_RETURN_IF_ERROR(CopyToDevice(batch.dense, &dense_, stream_));
    STRATA_RETURN_IF_ERROR(CopyToDevice(batch.labels, &labels_, stream_));
    STRATA_RETURN_IF_ERROR(CopyToDevice(batch.offsets, &offsets_, stream_));
    STRATA_RETURN_IF_ERROR(CopyToDevice(batch.rows, &rows_, stream_));
    STRATA_RETURN_IF_ERROR(
        CopyToDevice(batch.embeddings, &embeddings_, stream_));
    STRATA_RETURN_IF_ERROR(row_gradients_.Reserve(
        static_cast<size_t>(batch.num_rows) * config_.embedding_dim));
    return ReserveActivations(batch.batch_size);
  }

  // Room for the activations and gradients of n examples.
  absl::Status ReserveActivations(size_t n) {
    int widest = 1;  // of the MLP layers, for the grad_ buffers
    for (size_t l = 0; l < layout_.bottom.size(); ++l) {
      const int width = layout_.bottom[l].outputs;
      STRATA_RETURN_IF_ERROR(bottom_out_[l].Reserve(n * width));
      widest = std::max(widest, width);
    }
    for (size_t l = 0; l < layout_.top.size(); ++l) {
      const int width = layout_.top[l].outputs;
      STRATA_RETURN_IF_ERROR(top_out_[l].Reserve(n * width));
      widest = std::max(widest, width);
    }
    for (DeviceBuffer<float>& grad : grad_) {
      STRATA_RETURN_IF_ERROR(grad.Reserve(n * widest));
    }
    const size_t vector_values = n * vectors() * config_.embedding_dim;
    STRATA_RETURN_IF_ERROR(vectors_.Reserve(vector_values));
    STRATA_RETURN_IF_ERROR(vector_grad_.Reserve(vector_values));
    if (dot()) {
      const size_t width = layout_.interaction_width;
      STRATA_RETURN_IF_ERROR(interaction_.Reserve(n * width));
      STRATA_RETURN_IF_ERROR(interaction_grad_.Reserve(n * width));
    }
    STRATA_RETURN_IF_ERROR(probabilities_.Reserve(n));
    STRATA_RETURN_IF_ERROR(losses_.Reserve(n));
    if (ones_.capacity() < n) {
      STRATA_RETURN_IF_ERROR(ones_.Reserve(n));
      STRATA_CUDA_RETURN_IF_ERROR(
          model_internal::LaunchFill(ones_.data(), n, 1.0f, stream_));
    }
    return absl::OkStatus();
  }

  // outputs[l] = relu?(x W + b) through `layers`, x being batch x inputs.
  absl::Status ForwardMlp(const std::vector<DenseLayer>& layers, int batch,
                          const float* x,
                          std::vector<DeviceBuffer<float>>* outputs) {
    for (size_t l = 0; l < layers.size(); ++l) {
      const DenseLayer& layer = layers[l];
      float* y = (*outputs)[l].data();
      STRATA_RETURN_IF_ERROR(model_internal::RowMajorMatMul(
          cublas_, batch, layer.outputs, layer.inputs, x, weights(layer), y));
      STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchAddBiasRelu(
          y, parameters_.data() + layer.bias_offset, batch, layer.outputs,
          layer.relu, stream_));
      x = y;
    }
    return absl::OkStatus();
  }

  absl::Status Forward(int n) {
    const int dim = config_.embedding_dim;
    STRATA_RETURN_IF_ERROR(
        ForwardMlp(layout_.bottom, n, dense_.data(), &bottom_out_));
    STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchPoolEmbeddings(
        Shape(n), bottom_out_.back().data(), embeddings_.data(),
        offsets_.data(), rows_.data(), vectors_.data(), stream_));
    if (dot()) {
      STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchDotInteraction(
          vectors_.data(), pair_first_.data(), pair_second_.data(), n,
          vectors(), dim, pairs(), interaction_.data(), stream_));
    }
    return ForwardMlp(layout_.top, n, interaction(), &top_out_);
  }

  // logits += batch.logit_offsets (the wide term), when there are any.
  absl::Status AddLogitOffsets(const ModelBatch& batch) {
    if (batch.logit_offsets.empty()) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(
        CopyToDevice(batch.logit_offsets, &logit_offsets_, stream_));
    const float one = 1.0f;
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasSaxpy(cublas_, batch.batch_size, &one,
                                              logit_offsets_.data(), 1,
                                              top_out_.back().data(), 1));
    return absl::OkStatus();
  }

  PoolingShape Shape(int n) const {
    PoolingShape shape;
    shape.batch = n;
    shape.fields = config_.num_fields;
    shape.dim = config_.embedding_dim;
    shape.mean = config_.pooling == Pooling::kMean;
    return shape;
  }

  // Back through `layers` from d(output of the last layer) in grad_[0]
  // (clobbers both grad_ buffers): the parameter gradients, and d(input)
  // into `input_grad` unless it is null.
  absl::Status BackwardMlp(const std::vector<DenseLayer>& layers, int batch,
                           const float* input,
                           const std::vector<DeviceBuffer<float>>& outputs,
                           float* input_grad) {
    float* grad = grad_[0].data();
    float* next = grad_[1].data();
    for (size_t l = layers.size(); l-- > 0;) {
      const DenseLayer& layer = layers[l];
      if (layer.relu) {
        STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchReluMask(
            outputs[l].data(), grad, static_cast<size_t>(batch) * layer.outputs,
            stream_));
      }
      const float* x = l == 0 ? input : outputs[l - 1].data();
      STRATA_RETURN_IF_ERROR(model_internal::RowMajorMatMulTransA(
          cublas_, batch, layer.outputs, layer.inputs, x, grad,
          dense_gradients_.data() + layer.weight_offset));
      STRATA_RETURN_IF_ERROR(model_internal::RowMajorColumnSums(
          cublas_, batch, layer.outputs, grad, ones_.data(),
          dense_gradients_.data() + layer.bias_offset));
      if (l == 0 && input_grad == nullptr) break;
      STRATA_RETURN_IF_ERROR(model_internal::RowMajorMatMulTransB(
          cublas_, batch, layer.outputs, layer.inputs, grad, weights(layer),
          l == 0 ? input_grad : next));
      std::swap(grad, next);
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const ModelBatch& batch) {
    const int n = batch.batch_size;
    const int dim = config_.embedding_dim;
    // For kConcat d(interaction) is d(vectors) itself.
    STRATA_RETURN_IF_ERROR(
        BackwardMlp(layout_.top, n, interaction(), top_out_,
                    dot() ? interaction_grad_.data() : vector_grad_.data()));
    if (dot()) {
      STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchDotInteractionBackward(
          vectors_.data(), interaction_grad_.data(), n, vectors(), dim,
          vector_grad_.data(), stream_));
    }
    if (batch.num_rows > 0) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          row_gradients_.data(), 0,
          static_cast<size_t>(batch.num_rows) * dim * sizeof(float), stream_));
      STRATA_CUDA_RETURN_IF_ERROR(model_internal::LaunchScatterRowGradients(
          Shape(n), vector_grad_.data(), offsets_.data(), rows_.data(),
          row_gradients_.data(), stream_));
    }
    // d(bottom output) is the first vector's gradient of each example.
    const size_t row_bytes = dim * sizeof(float);
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        grad_[0].data(), row_bytes, vector_grad_.data(), vectors() * row_bytes,
        row_bytes, n, cudaMemcpyDeviceToDevice, stream_));
    return BackwardMlp(layout_.bottom, n, dense_.data(), bottom_out_,
                       /*input_grad=*/nullptr);
  }

  const ModelConfig config_;
  const DenseLayout layout_;
  const int device_;
  const std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  DeviceBuffer<float> parameters_;
  DeviceBuffer<float> dense_gradients_;
  DeviceBuffer<int> pair_first_, pair_second_;  // kDot's pairs (a < b)
  DeviceBuffer<float> ones_;                    // batch ones (bias grads)
  // The batch.
  DeviceBuffer<float> dense_, labels_, embeddings_, logit_offsets_;
  DeviceBuffer<uint32_t> offsets_, rows_;
  // Forward state of the last batch.
  std::vector<DeviceBuffer<float>> bottom_out_;
  std::vector<DeviceBuffer<float>> top_out_;
  DeviceBuffer<float> vectors_;      // batch x (F + 1) x dim
  DeviceBuffer<float> interaction_;  // batch x interaction_width (kDot)
  DeviceBuffer<float> probabilities_, losses_;
  // Backward state: grad_ ping-pongs through the MLP layers.
  DeviceBuffer<float> grad_[2];
  DeviceBuffer<float> interaction_grad_;  // kDot
  DeviceBuffer<float> vector_grad_;
  DeviceBuffer<float> row_gradients_;
  std::vector<float> host_losses_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DenseModel>> CreateCudaDenseModel(
    const ModelConfig& config, int device) {
  STRATA_RETURN_IF_ERROR(ValidateModelConfig(config));
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    cudaGetLastError();  // Clears the error for later callers.
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device for the dense model",
        error == cudaSuccess
            ? std::string()
            : absl::StrCat(" (cudaGetDeviceCount: ", cudaGetErrorName(error),
                           ": ", cudaGetErrorString(error), ")")));
  }
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device,
                     " does not exist (this machine has ", devices, ")"));
  }
  auto model = std::make_unique<CudaDenseModel>(config, device);
  STRATA_RETURN_IF_ERROR(model->Init());
  return std::unique_ptr<DenseModel>(std::move(model));
}

bool CudaModelCompiledIn() { return true; }

}  // namespace strata
