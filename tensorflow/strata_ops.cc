// Op definitions of libstrata_tf_ops.so (kernels in strata_kernels.cc).
//
// Every op names its PS connection by attributes: `shards`
// ("host:port,host:port" in shard order), `rpc_timeout_s` (deadline of each
// attempt), `retry_deadline_s` (how long UNAVAILABLE shards are retried),
// the optional TLS and token files, and `wire_float16` (rows and gradients
// as half floats on the wire, to the training PS). The ops are stateful:
// TensorFlow never caches, dedups or constant-folds them, and tf.function runs
// each one (automatic control dependencies) even when nothing reads its output.
// Ids are int64 holding uint64 feature keys bit for bit.

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace strata {
namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kShards[] = "shards: string";
constexpr char kRpcTimeout[] = "rpc_timeout_s: float = 10";
constexpr char kRetryDeadline[] = "retry_deadline_s: float = 30";
constexpr char kTlsCaFile[] = "tls_ca_file: string = ''";
constexpr char kTlsCertFile[] = "tls_client_cert_file: string = ''";
constexpr char kTlsKeyFile[] = "tls_client_key_file: string = ''";
constexpr char kTokenFile[] = "auth_token_file: string = ''";
constexpr char kWireFloat16[] = "wire_float16: bool = false";

// The connection attributes, in a REGISTER_OP chain (a macro: REGISTER_OP
// is one, and its builder cannot be passed through a function).
#define STRATA_CONNECTION_ATTRS     \
  .Attr(strata::kShards)            \
      .Attr(strata::kRpcTimeout)    \
      .Attr(strata::kRetryDeadline) \
      .Attr(strata::kTlsCaFile)     \
      .Attr(strata::kTlsCertFile)   \
      .Attr(strata::kTlsKeyFile)    \
      .Attr(strata::kTokenFile)     \
      .Attr(strata::kWireFloat16)

// values = ids.shape + [dim].
absl::Status LookupShape(InferenceContext* c) {
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  ShapeHandle values;
  TF_RETURN_IF_ERROR(c->Concatenate(c->input(0), c->Vector(dim), &values));
  c->set_output(0, values);
  return absl::OkStatus();
}

// gradients must be ids.shape + [dim]; `done` is a scalar.
absl::Status PushShape(InferenceContext* c) {
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  ShapeHandle expected;
  TF_RETURN_IF_ERROR(c->Concatenate(c->input(0), c->Vector(dim), &expected));
  ShapeHandle merged;
  TF_RETURN_IF_ERROR(c->Merge(c->input(1), expected, &merged));
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

}  // namespace
}  // namespace strata

// STRATA_CONNECTION_ATTRS is a link of each chain: kept on a line of its own.
// clang-format off
// Rows of `ids` from table `table` (dimension `dim`) of the training PS.
// The distinct ids are pulled once each; unseen ids read as their initial
// values (a pure function of the table's seed and the id). With
// `wait_for_pushes`, it first waits until every background push of its
// connection (StrataPush with max_pending_pushes > 0) has finished, and
// fails with the error of one that failed: what inference after training
// does, so that it reads every update.
REGISTER_OP("StrataLookup")
    .Input("ids: int64")
    .Output("values: float")
    .Attr("table: string")
    .Attr("dim: int >= 1")
    .Attr("wait_for_pushes: bool = false")
    STRATA_CONNECTION_ATTRS
    .SetIsStateful()
    .SetShapeFn(strata::LookupShape);

// Rows of `ids` from table `table` of the serving PS: `shards` lists the
// strata-serving replicas. What an exported model looks its rows up with,
// so that it serves without the training cluster. Ids it holds no row for
// read as zeros. Not differentiable.
REGISTER_OP("StrataServingLookup")
    .Input("ids: int64")
    .Output("values: float")
    .Attr("table: string")
    .Attr("dim: int >= 1")
    STRATA_CONNECTION_ATTRS
    .SetIsStateful()
    .SetShapeFn(strata::LookupShape);

// Sums the gradients (shape ids.shape + [dim]) of each distinct id and
// pushes the sums; the PS applies the table's optimizer to the rows.
// `done` is 0.0 once the push succeeded. Whatever consumes it runs after the
// push, and a graph optimizer can never drop the push as unused: the Keras
// layer returns it as the gradient of its push trigger, which the Keras
// optimizer reads. (A push with no output, kept only by a control
// dependency, was pruned by Grappler inside model.fit's nested functions.)
// With `max_pending_pushes` = 0 the op returns once the PS applied the push.
// With N > 0 it queues the push on a background thread of its connection and
// returns (`done` then means queued): at most N pushes of the table are
// queued or running, so a later lookup may miss at most the last N steps'
// updates of this process (strata-worker's --staleness); the error of a
// failed background push is the error of the next StrataPush of the table
// or of a StrataLookup with wait_for_pushes.
REGISTER_OP("StrataPush")
    .Input("ids: int64")
    .Input("gradients: float")
    .Output("done: float")
    .Attr("table: string")
    .Attr("dim: int >= 1")
    .Attr("max_pending_pushes: int >= 0 = 0")
    STRATA_CONNECTION_ATTRS
    .SetIsStateful()
    .SetShapeFn(strata::PushShape);

// Creates `table` on every shard; a no-op when it exists with the same
// config, ALREADY_EXISTS when with another. Numbers left 0 take the
// server's defaults (strata.v1.TableConfig).
REGISTER_OP("StrataCreateTable")
    .Attr("table: string")
    .Attr("dim: int >= 1")
    .Attr("seed: int = 0")
    .Attr("optimizer: {'sgd', 'adagrad', 'adam', 'ftrl'} = 'adagrad'")
    .Attr("learning_rate: float = 0")
    .Attr("initial_accumulator: float = 0")
    .Attr("epsilon: float = 0")
    .Attr("beta1: float = 0")
    .Attr("beta2: float = 0")
    .Attr("ftrl_beta: float = 0")
    .Attr("l1: float = 0")
    .Attr("l2: float = 0")
    .Attr(
        "initializer: {'zeros', 'constant', 'uniform', 'truncated_normal'} = "
        "'zeros'")
    .Attr("init_value: float = 0")
    .Attr("init_min: float = 0")
    .Attr("init_max: float = 0")
    .Attr("init_mean: float = 0")
    .Attr("init_stddev: float = 0")
    STRATA_CONNECTION_ATTRS
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);
// clang-format on
