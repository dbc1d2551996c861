// CPU kernels of the ops in strata_ops.cc. Each call into the PS blocks the
// kernel's thread until the PS answers or the retry deadline passes; its
// error (the PS's code and message) becomes the op's error.

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/ps_connection.h"
#include "tensorflow/strata_tf_client.h"

namespace strata {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// The distinct ids of a batch in first-seen order, and where each id of the
// batch is among them: ids[i] == keys[slot[i]].
struct DistinctIds {
  std::vector<uint64_t> keys;
  std::vector<size_t> slot;
};

DistinctIds Deduplicate(const uint64_t* ids, size_t n) {
  DistinctIds distinct;
  distinct.slot.resize(n);
  std::unordered_map<uint64_t, size_t> index;
  index.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = index.try_emplace(ids[i], distinct.keys.size());
    if (inserted) distinct.keys.push_back(ids[i]);
    distinct.slot[i] = it->second;
  }
  return distinct;
}

// int64 ids are uint64 keys bit for bit (the two may alias).
const uint64_t* KeysOf(const Tensor& ids) {
  return reinterpret_cast<const uint64_t*>(ids.flat<int64_t>().data());
}

// The connection shared with other kernels of the same attributes, and the
// table's name and dimension when the op has them.
class StrataKernel : public OpKernel {
 public:
  // `serving`: the op's `shards` are strata-serving replicas.
  explicit StrataKernel(OpKernelConstruction* context, bool serving = false)
      : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("table", &table_));
    OP_REQUIRES_OK(context, context->GetAttr("dim", &dim_));
    absl::StatusOr<ConnectionOptions> options =
        ConnectionOptions::FromAttrs(context);
    OP_REQUIRES_OK(context, options.status());
    options->serving = serving;
    absl::StatusOr<PsConnection*> connection =
        PsConnection::Acquire(context, *options);
    OP_REQUIRES_OK(context, connection.status());
    connection_ = *connection;
  }
  ~StrataKernel() override {
    if (connection_ != nullptr) connection_->Unref();
  }
  StrataKernel(const StrataKernel&) = delete;
  StrataKernel& operator=(const StrataKernel&) = delete;

 protected:
  PsConnection* connection_ = nullptr;
  std::string table_;
  int64_t dim_ = 0;
};

// Rows of the distinct ids, pulled once each by `pull(keys, n, out)`, then
// spread over the output in the order of `ids`.
template <typename Pull>
void LookUpRows(OpKernelContext* context, const Tensor& ids, int64_t dim_attr,
                const Pull& pull) {
  TensorShape shape = ids.shape();
  OP_REQUIRES_OK(context, shape.AddDimWithStatus(dim_attr));
  Tensor* values = nullptr;
  OP_REQUIRES_OK(context, context->allocate_output(0, shape, &values));
  const size_t n = ids.NumElements();
  if (n == 0) return;
  const size_t dim = dim_attr;
  float* out = values->flat<float>().data();
  DistinctIds distinct = Deduplicate(KeysOf(ids), n);
  if (distinct.keys.size() == n) {  // in order already: pull in place
    OP_REQUIRES_OK(context, pull(distinct.keys.data(), n, out));
    return;
  }
  std::vector<float> rows(distinct.keys.size() * dim);
  OP_REQUIRES_OK(context,
                 pull(distinct.keys.data(), distinct.keys.size(), rows.data()));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim, rows.data() + distinct.slot[i] * dim,
                dim * sizeof(float));
  }
}

class StrataLookupOp : public StrataKernel {
 public:
  explicit StrataLookupOp(OpKernelConstruction* context)
      : StrataKernel(context) {
    OP_REQUIRES_OK(context,
                   context->GetAttr("wait_for_pushes", &wait_for_pushes_));
  }

  void Compute(OpKernelContext* context) override {
    if (wait_for_pushes_) {
      OP_REQUIRES_OK(context, connection_->WaitForPushes());
    }
    LookUpRows(context, context->input(0), dim_,
               [this](const uint64_t* keys, size_t n, float* out) {
                 return connection_->Pull(table_, keys, n, dim_, out);
               });
  }

 private:
  bool wait_for_pushes_ = false;
};

class StrataServingLookupOp : public StrataKernel {
 public:
  explicit StrataServingLookupOp(OpKernelConstruction* context)
      : StrataKernel(context, /*serving=*/true) {}

  void Compute(OpKernelContext* context) override {
    LookUpRows(context, context->input(0), dim_,
               [this](const uint64_t* keys, size_t n, float* out) {
                 return connection_->ServingLookup(table_, keys, n, dim_, out);
               });
  }
};

class StrataPushOp : public StrataKernel {
 public:
  explicit StrataPushOp(OpKernelConstruction* context) : StrataKernel(context) {
    OP_REQUIRES_OK(context,
                   context->GetAttr("max_pending_pushes", &max_pending_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& ids = context->input(0);
    const Tensor& gradients = context->input(1);
    TensorShape expected = ids.shape();
    OP_REQUIRES_OK(context, expected.AddDimWithStatus(dim_));
    OP_REQUIRES(
        context, gradients.shape() == expected,
        absl::InvalidArgumentError(
            "StrataPush to table '" + table_ + "': gradients of shape " +
            gradients.shape().DebugString() + " for ids of shape " +
            ids.shape().DebugString() + " and dim " + std::to_string(dim_)));
    Tensor* done = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, {}, &done));
    done->scalar<float>()() = 0.0f;
    const size_t n = ids.NumElements();
    if (n == 0) return;
    const size_t dim = dim_;
    const float* in = gradients.flat<float>().data();
    DistinctIds distinct = Deduplicate(KeysOf(ids), n);
    if (distinct.keys.size() == n) {
      OP_REQUIRES_OK(context, Push(distinct.keys.data(), n, in));
      return;
    }
    // One summed gradient per distinct id: the PS applies its optimizer
    // once per row and step, as for any other push.
    std::vector<float> sums(distinct.keys.size() * dim, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      float* sum = sums.data() + distinct.slot[i] * dim;
      const float* g = in + i * dim;
      for (size_t d = 0; d < dim; ++d) sum[d] += g[d];
    }
    OP_REQUIRES_OK(
        context, Push(distinct.keys.data(), distinct.keys.size(), sums.data()));
  }

 private:
  absl::Status Push(const uint64_t* keys, size_t n, const float* gradients) {
    if (max_pending_ == 0) {
      return connection_->Push(table_, keys, n, dim_, gradients);
    }
    return connection_->PushAsync(table_, keys, n, dim_, gradients,
                                  static_cast<int>(max_pending_));
  }

  int64_t max_pending_ = 0;
};

int OptimizerType(const std::string& name) {
  if (name == "sgd") return STRATA_TF_OPTIMIZER_SGD;
  if (name == "adam") return STRATA_TF_OPTIMIZER_ADAM;
  if (name == "ftrl") return STRATA_TF_OPTIMIZER_FTRL;
  return STRATA_TF_OPTIMIZER_ADAGRAD;  // the attr allows nothing else
}

int InitializerType(const std::string& name) {
  if (name == "constant") return STRATA_TF_INITIALIZER_CONSTANT;
  if (name == "uniform") return STRATA_TF_INITIALIZER_UNIFORM;
  if (name == "truncated_normal") {
    return STRATA_TF_INITIALIZER_TRUNCATED_NORMAL;
  }
  return STRATA_TF_INITIALIZER_ZEROS;
}

class StrataCreateTableOp : public StrataKernel {
 public:
  explicit StrataCreateTableOp(OpKernelConstruction* context)
      : StrataKernel(context) {
    std::string optimizer, initializer;
    int64_t seed = 0;
    StrataTfTableConfig& c = config_;
    for (absl::Status s : {
             context->GetAttr("seed", &seed),
             context->GetAttr("optimizer", &optimizer),
             context->GetAttr("learning_rate", &c.learning_rate),
             context->GetAttr("initial_accumulator", &c.initial_accumulator),
             context->GetAttr("epsilon", &c.epsilon),
             context->GetAttr("beta1", &c.beta1),
             context->GetAttr("beta2", &c.beta2),
             context->GetAttr("ftrl_beta", &c.ftrl_beta),
             context->GetAttr("l1", &c.l1),
             context->GetAttr("l2", &c.l2),
             context->GetAttr("initializer", &initializer),
             context->GetAttr("init_value", &c.init_value),
             context->GetAttr("init_min", &c.init_min),
             context->GetAttr("init_max", &c.init_max),
             context->GetAttr("init_mean", &c.init_mean),
             context->GetAttr("init_stddev", &c.init_stddev),
         }) {
      OP_REQUIRES_OK(context, s);
    }
    c.seed = static_cast<uint64_t>(seed);
    c.optimizer = OptimizerType(optimizer);
    c.initializer = InitializerType(initializer);
  }

  void Compute(OpKernelContext* context) override {
    StrataTfTableConfig config = config_;
    config.name = table_.c_str();
    config.dim = static_cast<uint32_t>(dim_);
    OP_REQUIRES_OK(context, connection_->CreateTable(config));
  }

 private:
  StrataTfTableConfig config_ = {};
};

REGISTER_KERNEL_BUILDER(Name("StrataLookup").Device(tensorflow::DEVICE_CPU),
                        StrataLookupOp);
REGISTER_KERNEL_BUILDER(
    Name("StrataServingLookup").Device(tensorflow::DEVICE_CPU),
    StrataServingLookupOp);
REGISTER_KERNEL_BUILDER(Name("StrataPush").Device(tensorflow::DEVICE_CPU),
                        StrataPushOp);
REGISTER_KERNEL_BUILDER(
    Name("StrataCreateTable").Device(tensorflow::DEVICE_CPU),
    StrataCreateTableOp);

}  // namespace
}  // namespace strata
