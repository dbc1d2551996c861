"""TensorFlow integration of Strata: ops over the training PS and a Keras
layer whose rows live there.

    import strata.tf
    rows = strata.tf.Embedding("ctr", 16, shards="127.0.0.1:50051")(ids)

The ops come from libstrata_tf_ops.so (tensorflow), found through
STRATA_TF_OPS_LIBRARY, else next to this package, else in
$STRATA_BIN_DIR/../lib, ./build/lib or the checkout's build/lib; failing
those, it is built once from the checkout strata was installed from (pip
builds strata before it installs a TensorFlow of the same command) and
copied next to this package. It talks to
the PS through libstrata_tf_client.so, loaded so that Strata's
gRPC/protobuf/Abseil never bind to TensorFlow's (docs/ARCHITECTURE.md).

Errors of the PS arrive as tf.errors with its code and message: an unknown
table is tf.errors.NotFoundError, a PS that stays unreachable past the
retry deadline tf.errors.UnavailableError or DeadlineExceededError.
"""

from ._ops import (connection_attrs, create_table, embedding_lookup,
                   library_path, load_ops, lookup, push, serving_lookup)
from .checkpoints import CheckpointCallback, restore_checkpoint
from .layers import Embedding, export_for_serving, wait_for_pushes

__all__ = ["Embedding", "create_table", "lookup", "push", "embedding_lookup",
           "serving_lookup", "export_for_serving", "CheckpointCallback",
           "restore_checkpoint", "connection_attrs", "wait_for_pushes",
           "load_ops", "library_path"]
