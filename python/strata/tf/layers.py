"""The Keras 3 layer over the Strata ops."""

import keras
import tensorflow as tf

from . import _ops
from .. import training


COMBINERS = (None, "sum", "mean", "sqrtn")


def _multi_hot(ids, weights, padding_id=None):
    """(flat ids, example of each id, batch size, flat float weights or
    None) of [batch, None] ids: ragged, sparse, or dense."""
    if isinstance(ids, tf.SparseTensor):
        if ids.shape.rank is not None and ids.shape.rank != 2:
            raise ValueError("strata.tf.Embedding: sparse ids must be "
                             f"[batch, n], got rank {ids.shape.rank}")
        segments = ids.indices[:, 0]
        batch = ids.dense_shape[0]
        flat_ids = ids.values
        if weights is not None:
            if not isinstance(weights, tf.SparseTensor):
                raise ValueError("strata.tf.Embedding: sparse ids need "
                                 "sparse weights with the same indices")
            weights = weights.values
    else:
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(
                tf.convert_to_tensor(ids),
                padding=None if padding_id is None else
                tf.constant(padding_id, tf.int64))
        if ids.ragged_rank != 1:
            raise ValueError("strata.tf.Embedding: ragged ids must be "
                             "[batch, None]")
        segments = ids.value_rowids()
        batch = ids.nrows()
        flat_ids = ids.values
        if weights is not None:
            if not isinstance(weights, tf.RaggedTensor):
                # Cut to the ids' rows, so that padding's weights drop too.
                weights = tf.RaggedTensor.from_tensor(
                    tf.convert_to_tensor(weights), lengths=ids.row_lengths())
            weights = weights.values
    if weights is not None:
        weights = tf.cast(weights, tf.float32)
    return flat_ids, tf.cast(segments, tf.int32), tf.cast(batch, tf.int32), \
        weights


@keras.saving.register_keras_serializable(package="strata")
class Embedding(keras.layers.Layer):
    """Embedding rows that live on a Strata training PS.

    Forward: the rows of the ids (any integer shape; uint64 keys are taken
    bit for bit), pulled once per distinct id: shape ids.shape + [dim],
    float32. Backward: the gradient with respect to the rows, summed per
    distinct id, is pushed to the PS, whose table optimizer (`optimizer`,
    `learning_rate`, ...) updates them there. The Keras optimizer never sees
    the rows: it trains only the dense weights.

    The push happens when the gradient with respect to the layer's one
    trainable weight, a scalar `push_trigger` whose gradient is always zero,
    is computed: model.fit and tape.gradient(loss, model.trainable_variables)
    do so; a hand-written loop that leaves that weight out pushes nothing,
    and one that computes the gradient twice pushes twice. Works eagerly, in
    tf.function and in model.fit (the layer has no XLA kernel, so it sets
    supports_jit = False and jit_compile="auto" stays off).

    Asynchronous pushes: with `push_staleness` N > 0, a training step queues
    its push on a background thread and goes on (at most N pushes of the
    table queued or running), so the push of step t overlaps step t+1; a
    training lookup may then miss the updates of at most the last N steps
    of this process, as strata-worker's --staleness allows. Lookups outside
    training (predict, evaluate, a call with training=False or unset) first
    wait for every background push, and so do wait_for_pushes(),
    CheckpointCallback and the process's normal exit. A background push
    that fails (a shard unreachable past `retry_deadline`) fails the next
    step. 0 (the default) pushes inside the step: exact, and slower.

    Multi-hot and sequence features: with `combiner` ("sum", "mean" or
    "sqrtn"), ids may be a tf.RaggedTensor or tf.SparseTensor of shape
    [batch, None] (or dense [batch, n]), optionally with `weights` of the
    same structure (call(ids, weights)), and each example's rows are
    combined as tf.nn.embedding_lookup_sparse does: sum(w * row), divided
    by sum(w) for "mean" or sqrt(sum(w^2)) for "sqrtn"; an example without
    ids gets zeros. Output [batch, dim]. Gradients of an id that repeats,
    within or across examples, are summed before the one push.

    Args:
      table: PS table name. dim: its dimension.
      shards: "host:port" or a list, in shard-index order.
      optimizer, learning_rate, optimizer_args, initializer,
        initializer_args, seed: the table config (see
        strata.ParameterServerClient.create_table); defaults are those of
        strata-worker: Adagrad, learning rate 0.05, initial accumulator 0.1,
        truncated normal with stddev 0.01.
      combiner: None (one row per id, output ids.shape + [dim]) or "sum",
        "mean", "sqrtn" (see above).
      padding_id: with a combiner and dense [batch, n] ids, trailing ids
        equal to it are padding, not ids (an int64; a padded matrix is what
        a serving signature can take, where ragged tensors cannot).
      serving: None (train against `shards`), or strata-serving replicas
        ("host:port" or a list): the layer then looks its rows up there
        (StrataServingLookup), pushes nothing and creates no table. See
        export_for_serving.
      push_staleness: see "Asynchronous pushes" above; 1 is strata-worker's
        default.
      create_table: create the table on the PS when the layer is built (a
        no-op when it exists with the same config; AlreadyExistsError when
        with another).
      rpc_timeout, retry_deadline, tls_ca_file, tls_client_cert_file,
        tls_client_key_file, auth_token_file: the connection (see
        strata.tf.connection_attrs).
      wire_float16: pulled rows and pushed gradients travel as half floats
        (half the bytes; values rounded to the nearest half, the shards keep
        float32 rows).

    Example:
      ids = keras.Input(shape=(26,), dtype="int64")
      rows = strata.tf.Embedding("ctr", 16, shards="127.0.0.1:50051")(ids)
    """

    def __init__(self, table, dim, shards,
                 optimizer=training.DEFAULT_OPTIMIZER,
                 learning_rate=training.DEFAULT_LEARNING_RATE,
                 optimizer_args=None,
                 initializer=training.DEFAULT_INITIALIZER,
                 initializer_args=None,
                 seed=0, create_table=True, combiner=None, padding_id=None,
                 serving=None, push_staleness=0,
                 rpc_timeout=10.0,
                 retry_deadline=30.0, tls_ca_file="", tls_client_cert_file="",
                 tls_client_key_file="", auth_token_file="",
                 wire_float16=False, **kwargs):
        super().__init__(**kwargs)
        if optimizer_args is None:
            optimizer_args = training.default_optimizer_args(optimizer)
        if initializer_args is None:
            initializer_args = training.default_initializer_args(initializer)
        self.table = table
        self.dim = int(dim)
        self.create_table = bool(create_table)
        if combiner not in COMBINERS:
            raise ValueError(f"strata.tf.Embedding: unknown combiner "
                             f"{combiner!r} (want None, 'sum', 'mean' or "
                             "'sqrtn')")
        self.combiner = combiner
        self.serving = serving
        self.padding_id = None if padding_id is None else int(padding_id)
        self.push_staleness = int(push_staleness)
        if self.push_staleness < 0:
            raise ValueError("strata.tf.Embedding: push_staleness must be "
                             f">= 0, got {push_staleness}")
        self._table_config = dict(
            optimizer=optimizer, learning_rate=learning_rate,
            optimizer_args=dict(optimizer_args or {}),
            initializer=initializer,
            initializer_args=dict(initializer_args or {}), seed=int(seed))
        self._connection = dict(
            shards=shards, rpc_timeout=float(rpc_timeout),
            retry_deadline=float(retry_deadline), tls_ca_file=tls_ca_file,
            tls_client_cert_file=tls_client_cert_file,
            tls_client_key_file=tls_client_key_file,
            auth_token_file=auth_token_file, wire_float16=bool(wire_float16))
        # Checked now, so that a bad config fails at construction.
        _ops.table_attrs(**self._table_config)
        _ops.connection_attrs(**self._connection)
        self.supports_jit = False

    def build(self, input_shape=None):
        self.push_trigger = self.add_weight(
            name="push_trigger", shape=(), initializer="zeros",
            trainable=True)
        if self.create_table and not self.serving:
            _ops.create_table(self.table, self.dim, **self._table_config,
                              **self._connection)

    def call(self, ids, weights=None, training=None):
        trigger = tf.convert_to_tensor(self.push_trigger)
        # Only a training step may read rows its own queued pushes have not
        # reached yet.
        wait = self.push_staleness > 0 and training is not True
        if self.combiner is None:
            if weights is not None:
                raise ValueError("strata.tf.Embedding: weights need a "
                                 "combiner")
            if isinstance(ids, (tf.RaggedTensor, tf.SparseTensor)):
                raise ValueError("strata.tf.Embedding: ragged or sparse ids "
                                 "need a combiner ('sum', 'mean', 'sqrtn')")
            return self._rows(ids, trigger, wait)
        return self._combined(ids, weights, trigger, wait)

    def wait_for_pushes(self):
        """Waits until the PS has applied every background push of this
        layer's connection (push_staleness > 0); raises the error of one
        that failed."""
        if not self.serving:
            _ops.wait_for_pushes(**self._connection)

    def _rows(self, ids, trigger, wait):
        if self.serving:
            connection = dict(self._connection)
            del connection["shards"]
            return _ops.serving_lookup(ids, self.table, self.dim, self.serving,
                                       **connection)
        return _ops.embedding_lookup(ids, trigger, self.table, self.dim,
                                     max_pending_pushes=self.push_staleness,
                                     wait_for_pushes=wait, **self._connection)

    def _combined(self, ids, weights, trigger, wait):
        flat_ids, segments, batch, flat_weights = _multi_hot(
            ids, weights, self.padding_id)
        rows = self._rows(flat_ids, trigger, wait)  # [n, dim]
        if flat_weights is None:
            flat_weights = tf.ones(tf.shape(flat_ids), tf.float32)
        summed = tf.math.unsorted_segment_sum(
            rows * flat_weights[:, None], segments, batch)
        if self.combiner == "sum":
            return summed
        if self.combiner == "mean":
            norm = tf.math.unsorted_segment_sum(flat_weights, segments, batch)
        else:
            norm = tf.sqrt(tf.math.unsorted_segment_sum(
                tf.square(flat_weights), segments, batch))
        return tf.math.divide_no_nan(summed, norm[:, None])

    def compute_output_shape(self, input_shape):
        if self.combiner is not None:
            return (input_shape[0], self.dim)
        return tuple(input_shape) + (self.dim,)

    def get_config(self):
        config = super().get_config()
        config.update(table=self.table, dim=self.dim,
                      create_table=self.create_table, combiner=self.combiner,
                      serving=self.serving, padding_id=self.padding_id,
                      push_staleness=self.push_staleness,
                      **self._table_config, **self._connection)
        return config


def wait_for_pushes(model):
    """Waits until the PS has applied every background push of the
    strata.tf.Embedding layers of `model` (see push_staleness)."""
    for layer in model._flatten_layers():
        if isinstance(layer, Embedding):
            layer.wait_for_pushes()


def export_for_serving(model, path, serving, **export_args):
    """Exports `model` as a SavedModel (model.export: endpoint `serve`,
    signature `serving_default`, what TensorFlow Serving loads) whose
    strata.tf.Embedding layers look their rows up on the serving PS
    `serving` ("host:port" or a list of strata-serving replicas) instead of
    the training shards, so that it answers without the training cluster.
    The one custom-op dependency of the SavedModel is libstrata_tf_ops.so:
    load it first (strata.tf.load_ops(), or TF Serving's custom-op build).
    The model itself is left as it was."""
    layers = [layer for layer in model._flatten_layers()
              if isinstance(layer, Embedding)]
    if not layers:
        raise ValueError("strata.tf.export_for_serving: the model has no "
                         "strata.tf.Embedding layer")
    before = [layer.serving for layer in layers]
    try:
        for layer in layers:
            layer.serving = serving
        model.export(str(path), **export_args)
    finally:
        for layer, was in zip(layers, before):
            layer.serving = was
