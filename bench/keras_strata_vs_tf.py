#!/usr/bin/env python3
"""Keras with its embeddings on Strata vs Keras with them inside TensorFlow.

Trains the click model of examples/keras_ctr.py two or three times in one
process, on the same parsed data, in the same order, with the same dense
model, batch size and Keras loop (model.fit):

  strata  strata.tf.Embedding: one table on a Strata shard; each step pulls
          the batch's distinct rows and pushes their summed gradients; the
          shard applies Adagrad. The push is queued in the background
          (--push_staleness, default 1, as strata-worker's --staleness).
  strata_sync
          the same with push_staleness 0: each push inside its step.
  tf      keras.layers.Embedding over a vocabulary built from the training
          keys (row 0: out of vocabulary, never trained, as a key first seen
          at evaluation keeps its initial value on a shard); its rows are
          updated in the same train step by a sparse Adagrad with Strata's
          rule (a += g^2; w -= lr g / (sqrt(a) + eps), duplicates summed
          first) that reads and writes only the batch's rows. Keras' own
          Adagrad would rewrite the whole table every step.

Both start rows truncated-normal (stddev 0.01) and use Adam (1e-3) for the
dense weights. Prints one JSON line per run on stderr as it finishes and a
summary JSON line on stdout (samples/s, CPU seconds per 1,000 samples of the
process and, for the strata run, of the shard during fit, held-out AUC, the
ratios).

  PYTHONPATH=python build/python-venv/bin/python bench/keras_strata_vs_tf.py \\
      --train /tmp/d/train --holdout /tmp/d/train.holdout

Without --shards it starts one strata-server (--durability=periodic, as
training shards run) from $STRATA_BIN_DIR or build/bin, and stops it.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
import keras_ctr  # noqa: E402
from local_shard import LocalShard  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--holdout", required=True)
    p.add_argument("--shards", default="",
                   help="Strata shards; empty: start one strata-server")
    p.add_argument("--max_train_rows", type=int, default=0)
    p.add_argument("--max_holdout_rows", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--runs", default="strata,tf",
                   help="which runs, in order: strata, strata_sync (the "
                   "same with push_staleness 0), tf")
    p.add_argument("--push_staleness", type=int, default=1,
                   help="strata.tf.Embedding's push_staleness (0: push "
                   "inside the step)")
    p.add_argument("--intra_op_threads", type=int, default=0)
    p.add_argument("--inter_op_threads", type=int, default=0)
    args = p.parse_args(argv)
    # Everything else as examples/keras_ctr.py's defaults (strata-worker's).
    ctr = keras_ctr.parse_args(["--shards=unused", "--train=x",
                                "--holdout=x"])
    for name, value in vars(ctr).items():
        if not hasattr(args, name):
            setattr(args, name, value)
    return args


def tf_embedding_model(args, vocabulary_size):
    """The click model with a keras.layers.Embedding trained by a sparse
    Adagrad (Strata's rule) next to Adam for the dense weights."""
    import keras
    import tensorflow as tf

    embedding = keras.layers.Embedding(
        vocabulary_size, args.embedding_dim, name="tf_embedding",
        embeddings_initializer=keras.initializers.TruncatedNormal(
            stddev=args.sparse_init_stddev, seed=args.seed))
    inner = keras_ctr.build_model(embedding, args.embedding_dim,
                                  keras_ctr.widths(args.bottom_mlp),
                                  keras_ctr.widths(args.top_mlp),
                                  ids_dtype="int32")
    lr = args.sparse_learning_rate
    initial_accumulator = args.sparse_initial_accumulator
    epsilon = 1e-7  # the server's default

    class SparseAdagradModel(keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = inner
            self.table = embedding.embeddings
            self.accumulator = tf.Variable(
                tf.fill(self.table.shape, initial_accumulator),
                trainable=False)

        def call(self, x, training=False):
            return self.inner(x, training=training)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                logits = self.inner(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=logits)
            dense = [v for v in self.trainable_variables
                     if v is not self.table]
            grads = tape.gradient(loss, dense + [self.table])
            self.optimizer.apply_gradients(zip(grads[:-1], dense))
            rows_grad = grads[-1]  # IndexedSlices: the batch's rows only
            rows, position = tf.unique(rows_grad.indices)
            g = tf.math.unsorted_segment_sum(rows_grad.values, position,
                                             tf.size(rows))
            a = tf.gather(self.accumulator, rows) + g * g
            self.accumulator.scatter_update(tf.IndexedSlices(a, rows))
            self.table.value.scatter_sub(tf.IndexedSlices(
                lr * g / (tf.sqrt(a) + epsilon), rows))
            for metric in self.metrics:  # Keras' loss tracker
                if metric.name == "loss":
                    metric.update_state(loss)
            return {m.name: m.result() for m in self.metrics}

    return SparseAdagradModel()


def run(name, args, data, server_pids=()):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    dense, values, y = data["train"]
    dense_hold, values_hold, y_hold = data["holdout"]
    keys = keras_ctr.criteo_keys(values)
    keys_hold = keras_ctr.criteo_keys(values_hold)
    if name.startswith("strata"):
        # strata_sync: the same with every push inside its step.
        args = argparse.Namespace(**dict(
            vars(args), table=f"keras_bench_{name}_{int(time.time())}",
            push_staleness=0 if name == "strata_sync" else args.push_staleness))
        model = keras_ctr.build_model(keras_ctr.strata_embedding(args),
                                      args.embedding_dim,
                                      keras_ctr.widths(args.bottom_mlp),
                                      keras_ctr.widths(args.top_mlp))
        ids, ids_hold = keys.view(np.int64), keys_hold.view(np.int64)
    else:
        vocabulary = np.unique(keys)
        def index(k):
            at = np.minimum(np.searchsorted(vocabulary, k), vocabulary.size - 1)
            return np.where(vocabulary[at] == k, at + 1, 0).astype(np.int32)
        ids, ids_hold = index(keys), index(keys_hold)
        model = tf_embedding_model(args, vocabulary.size + 1)
    model.compile(optimizer=keras.optimizers.Adam(args.dense_learning_rate,
                                                  epsilon=1e-8),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  jit_compile=False)
    result = {"run": name}
    result.update(keras_ctr.fit_and_evaluate(
        model, ({"dense_features": dense, "ids": ids}, y),
        ({"dense_features": dense_hold, "ids": ids_hold}, y_hold),
        args.batch_size, args.eval_batch_size, args.epochs,
        server_pids=server_pids if name != "tf" else ()))
    result["cpu_seconds_per_1k_samples"] = round(
        result["trainer_cpu_seconds_per_1k_samples"] +
        result["server_cpu_seconds_per_1k_samples"], 4)
    if name == "tf":
        result["embedding_rows"] = int(vocabulary.size + 1)
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    data = keras_ctr.load_data(args)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    shard = None
    server_pids = ()
    if not args.shards:
        shard = LocalShard()
        args.shards = shard.address
        server_pids = (shard.proc.pid,)
    try:
        results = {name: run(name, args, data, server_pids)
                   for name in args.runs.split(",") if name}
    finally:
        if shard is not None:
            shard.stop()
    summary = {"train_rows": len(data["train"][2]),
               "holdout_rows": len(data["holdout"][2]),
               "batch_size": args.batch_size, "epochs": args.epochs,
               "tensorflow_version": tf.__version__,
               "cpus_available": len(os.sched_getaffinity(0))}
    for name, r in results.items():
        for key in ("samples_per_second", "samples_per_second_after_first_step",
                    "cpu_seconds_per_1k_samples", "holdout_auc",
                    "holdout_log_loss"):
            summary[f"{name}_{key}"] = r[key]
    for name in ("strata", "strata_sync"):
        if name not in results or "tf" not in results:
            continue
        summary[f"{name}_vs_tf_samples_per_second"] = round(
            results[name]["samples_per_second"] /
            results["tf"]["samples_per_second"], 3)
        summary[f"{name}_vs_tf_cpu_seconds_per_sample"] = round(
            results[name]["cpu_seconds_per_1k_samples"] /
            results["tf"]["cpu_seconds_per_1k_samples"], 3)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
