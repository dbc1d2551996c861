#!/usr/bin/env python3
"""Keras click model with its embeddings on Strata (strata.tf.Embedding).

Trains the DLRM-style model that strata-worker trains (worker/model), in
Keras, on Criteo-format text (strata-datagen writes it), with the 26
categorical fields' embeddings in ONE table on a Strata training cluster,
and prints one JSON line: held-out AUC (exact) and log loss, samples/s.

  build/bin/strata-datagen --out=/tmp/d/train --rows=200000 --holdout_rows=50000
  build/bin/strata-server --port=0 --port_file=/tmp/d/port --data_dir=/tmp/d/ps &
  PYTHONPATH=python build/python-venv/bin/python examples/keras_ctr.py \\
      --shards=127.0.0.1:$(cat /tmp/d/port) \\
      --train=/tmp/d/train --holdout=/tmp/d/train.holdout

Needs tensorflow, keras 3 and libstrata_tf_ops.so (python/README.md,
"TensorFlow").

Data. Each line is "label \\t I1..I13 \\t C1..C26". Integers (empty: 0)
become log(1 + max(x, 0)); a categorical value (8 hex digits, or empty) of
field f becomes the uint64 key strata-worker uses (worker/data/
criteo_format.cc): Mix64((((f + 1) << 33) | value) ^ "CRITEOKY"), with
value 2^32 for an empty field. A malformed line is skipped and counted.

Model (flags as strata-worker's): bottom MLP 13 -> 64 -> 16 (ReLU after
every layer), 26 rows of 16 from the table, dot interaction (the bottom
output and the pairwise dot products of the 27 vectors, 16 + 351 wide), top
MLP 128 -> 64 -> 1, mean sigmoid cross-entropy. Dense weights: Glorot
uniform, zero biases, Adam (lr 1e-3, eps 1e-8) run by Keras. Rows: on the
PS, whose optimizer updates them from the pushed gradients (default: Adagrad
lr 0.05, initial accumulator 0.1; rows start truncated-normal, stddev 0.01,
with the table seed --seed as strata-worker's). Training reads the file in
order, batch 1024, one pull and one push per step (like strata-worker
--staleness=0).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

NUM_DENSE = 13
NUM_FIELDS = 26
NUM_COLUMNS = 1 + NUM_DENSE + NUM_FIELDS
EMPTY = -1  # the value of an empty categorical field, before keying

_KEY_SALT = np.uint64(0x43524954454F4B59)  # "CRITEOKY"
_MISSING_VALUE = np.uint64(1 << 32)
_HEX = b"0123456789abcdefABCDEF"
_DIGITS = b"0123456789"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--shards", required=True,
                   help="host:port of every Strata training shard, in order")
    p.add_argument("--train", required=True, help="Criteo-format training file")
    p.add_argument("--holdout", required=True, help="Criteo-format held-out file")
    p.add_argument("--max_train_rows", type=int, default=0, help="0: all")
    p.add_argument("--max_holdout_rows", type=int, default=0, help="0: all")
    p.add_argument("--table", default="keras_ctr_embeddings")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--bottom_mlp", default="64")
    p.add_argument("--top_mlp", default="128,64")
    p.add_argument("--sparse_optimizer", default="adagrad",
                   choices=["sgd", "adagrad", "adam", "ftrl"])
    p.add_argument("--sparse_learning_rate", type=float, default=0.05)
    p.add_argument("--sparse_initial_accumulator", type=float, default=0.1,
                   help="Adagrad only")
    p.add_argument("--sparse_init_stddev", type=float, default=0.01)
    p.add_argument("--dense_learning_rate", type=float, default=1e-3)
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--eval_batch_size", type=int, default=16384)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1,
                   help="table seed (initial rows) and Keras seed")
    p.add_argument("--rpc_timeout_s", type=float, default=10.0)
    p.add_argument("--retry_deadline_s", type=float, default=60.0)
    p.add_argument("--push_staleness", type=int, default=1,
                   help="pushes queued in the background (0: push inside "
                   "the step); 1 is strata-worker's --staleness default")
    return p.parse_args(argv)


def widths(text):
    return [int(w) for w in text.split(",") if w.strip()]


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Data


def _mix64(x):
    """SplitMix64's finalizer over a uint64 array (common/hash.h Mix64)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def criteo_keys(values):
    """PS keys of categorical values (int64 [n, 26], EMPTY for an empty
    field) as strata-worker computes them (CriteoFeatureKey and
    CriteoMissingKey): uint64 [n, 26]."""
    values = np.asarray(values, dtype=np.int64)
    field = np.arange(values.shape[-1], dtype=np.uint64)
    value = np.where(values == EMPTY, _MISSING_VALUE,
                     values.astype(np.uint64))
    return _mix64((((field + np.uint64(1)) << np.uint64(33)) | value)
                  ^ _KEY_SALT)


def _integer(text):
    # As ParseCriteoInteger: empty is 0, else an optional '-' and 1..18
    # decimal digits.
    if not text:
        return 0
    digits = text[1:] if text.startswith(b"-") else text
    if not 0 < len(digits) <= 18 or digits.strip(_DIGITS):
        raise ValueError
    return int(text)


def _categorical(text):
    # As ParseCriteoHex: exactly 8 hex digits; empty is EMPTY.
    if not text:
        return EMPTY
    if len(text) != 8 or text.strip(_HEX):
        raise ValueError
    return int(text, 16)


def read_criteo(path, max_rows=0):
    """(labels float32 [n], dense float32 [n, 13], values int64 [n, 26],
    number of malformed lines skipped)."""
    labels, ints, values = [], [], []
    malformed = 0
    with open(path, "rb") as f:
        for line in f:
            if max_rows and len(labels) >= max_rows:
                break
            fields = line.rstrip(b"\n")
            if fields.endswith(b"\r"):
                fields = fields[:-1]
            fields = fields.split(b"\t")
            if len(fields) > NUM_COLUMNS or fields[0] not in (b"0", b"1"):
                malformed += 1
                continue
            fields += [b""] * (NUM_COLUMNS - len(fields))
            try:
                row_ints = [_integer(t) for t in fields[1:1 + NUM_DENSE]]
                row_values = [_categorical(t) for t in fields[1 + NUM_DENSE:]]
            except ValueError:
                malformed += 1
                continue
            labels.append(fields[0] == b"1")
            ints.append(row_ints)
            values.append(row_values)
    n = len(labels)
    ints = np.asarray(ints, dtype=np.int64).reshape(n, NUM_DENSE)
    dense = np.log1p(np.maximum(ints, 0).astype(np.float64)).astype(np.float32)
    return (np.asarray(labels, dtype=np.float32), dense,
            np.asarray(values, dtype=np.int64).reshape(n, NUM_FIELDS),
            malformed)


# ---------------------------------------------------------------------------
# Metrics


def exact_auc(labels, scores):
    """ROC AUC as the Mann-Whitney statistic; tied scores share midranks."""
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores, dtype=np.float64)
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    ranks = np.empty(scores.size)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0)
                 / (positives * negatives))


def log_loss(labels, logits):
    z = np.asarray(logits, dtype=np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - np.asarray(labels) * z))


# ---------------------------------------------------------------------------
# Model


def build_model(embedding, dim, bottom_mlp, top_mlp, ids_dtype="int64"):
    """The click model around `embedding` (a layer: ids [b, 26] -> rows
    [b, 26, dim]). Inputs {"dense_features": [b, 13], "ids": [b, 26]};
    output: the logit [b, 1]."""
    import keras
    import tensorflow as tf

    class DotInteraction(keras.layers.Layer):
        """[bottom, <v_i, v_j> for i < j] over v = (bottom, rows...)."""

        def call(self, bottom, rows):
            vectors = tf.concat([bottom[:, None, :], rows], axis=1)
            gram = tf.matmul(vectors, vectors, transpose_b=True)
            count = NUM_FIELDS + 1
            upper = np.flatnonzero(np.triu(np.ones((count, count)), k=1))
            pairs = tf.gather(tf.reshape(gram, [-1, count * count]), upper,
                              axis=1)
            return tf.concat([bottom, pairs], axis=1)

    def mlp(x, layer_widths, last_relu):
        for i, width in enumerate(layer_widths):
            relu = last_relu or i + 1 < len(layer_widths)
            x = keras.layers.Dense(width, activation="relu" if relu else None,
                                   kernel_initializer="glorot_uniform")(x)
        return x

    dense = keras.Input(shape=(NUM_DENSE,), name="dense_features",
                        dtype="float32")
    ids = keras.Input(shape=(NUM_FIELDS,), name="ids", dtype=ids_dtype)
    bottom = mlp(dense, bottom_mlp + [dim], last_relu=True)
    z = DotInteraction()(bottom, embedding(ids))
    logit = mlp(z, top_mlp + [1], last_relu=False)
    return keras.Model({"dense_features": dense, "ids": ids}, logit)


def cpu_seconds(pid="self"):
    """User + system CPU seconds a process has used so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fit_and_evaluate(model, train, holdout, batch_size, eval_batch_size,
                     epochs, server_pids=()):
    """Trains with model.fit over (inputs, labels) in file order, then
    scores the holdout. Returns the metrics as a dict, with the CPU seconds
    per 1,000 training samples of this process and of `server_pids` (the
    shards it trains against) during fit."""
    import keras

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not hasattr(self, "first"):
                self.first = time.perf_counter()

    (x, y), (x_hold, y_hold) = train, holdout
    clock = Clock()
    cpu_before = [cpu_seconds(pid) for pid in ("self", *server_pids)]
    start = time.perf_counter()
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs,
                        shuffle=False, verbose=0, callbacks=[clock])
    seconds = time.perf_counter() - start
    cpu_used = [cpu_seconds(pid) - before for pid, before in
                zip(("self", *server_pids), cpu_before)]
    samples = len(y) * epochs
    steps = -(-len(y) // batch_size) * epochs
    t = time.perf_counter()
    logits = model.predict(x_hold, batch_size=eval_batch_size,
                           verbose=0).reshape(-1)
    return {
        "train_rows": len(y), "holdout_rows": len(y_hold), "epochs": epochs,
        "batch_size": batch_size, "steps": steps,
        "train_seconds": round(seconds, 3),
        "samples_per_second": round(samples / seconds, 1),
        # Without the first step (tracing the tf.function).
        "samples_per_second_after_first_step": (
            round((samples - batch_size) / (start + seconds - clock.first), 1)
            if steps > 1 else None),
        "trainer_cpu_seconds_per_1k_samples": round(
            1000 * cpu_used[0] / samples, 4),
        "server_cpu_seconds_per_1k_samples": round(
            1000 * sum(cpu_used[1:]) / samples, 4),
        "train_loss_last_epoch": float(history.history["loss"][-1]),
        "holdout_auc": exact_auc(y_hold, logits),
        "holdout_log_loss": log_loss(y_hold, logits),
        "eval_seconds": round(time.perf_counter() - t, 3),
    }


def load_data(args):
    t = time.perf_counter()
    y, dense, values, bad = read_criteo(args.train, args.max_train_rows)
    y_hold, dense_hold, values_hold, bad_hold = read_criteo(
        args.holdout, args.max_holdout_rows)
    if len(y) == 0 or len(y_hold) == 0:
        raise SystemExit("keras_ctr: empty training or held-out file")
    log(f"parsed {len(y)} + {len(y_hold)} rows in "
        f"{time.perf_counter() - t:.1f} s ({bad + bad_hold} malformed)")
    return {"train": (dense, values, y), "holdout": (dense_hold, values_hold,
                                                     y_hold),
            "malformed_lines": bad + bad_hold,
            "parse_seconds": round(time.perf_counter() - t, 3)}


def strata_embedding(args):
    import strata.tf

    optimizer_args = ({"initial_accumulator": args.sparse_initial_accumulator}
                      if args.sparse_optimizer == "adagrad" else {})
    return strata.tf.Embedding(
        args.table, args.embedding_dim, shards=args.shards,
        optimizer=args.sparse_optimizer,
        learning_rate=args.sparse_learning_rate,
        optimizer_args=optimizer_args, initializer="truncated_normal",
        initializer_args={"stddev": args.sparse_init_stddev}, seed=args.seed,
        rpc_timeout=args.rpc_timeout_s, retry_deadline=args.retry_deadline_s,
        push_staleness=args.push_staleness, name="strata_embedding")


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    data = load_data(args)
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    model = build_model(strata_embedding(args), args.embedding_dim,
                        widths(args.bottom_mlp), widths(args.top_mlp))
    model.compile(
        optimizer=keras.optimizers.Adam(args.dense_learning_rate,
                                        epsilon=1e-8),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        jit_compile=False)

    def inputs(part):
        dense, values, y = data[part]
        ids = criteo_keys(values).view(np.int64)  # uint64 keys, bit for bit
        return {"dense_features": dense, "ids": ids}, y

    result = {"framework": "keras+strata", "shards": args.shards,
              "table": args.table, "sparse_optimizer": args.sparse_optimizer}
    result.update(fit_and_evaluate(model, inputs("train"), inputs("holdout"),
                                   args.batch_size, args.eval_batch_size,
                                   args.epochs))
    result.update(parse_seconds=data["parse_seconds"],
                  malformed_lines=data["malformed_lines"],
                  tensorflow_version=tf.__version__,
                  keras_version=keras.__version__,
                  cpus_available=len(os.sched_getaffinity(0)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
