#!/usr/bin/env python3
"""TensorFlow/Keras baseline of Strata's DLRM click model, for bench/RESULTS.md.

Trains the same model as Strata's C++ worker (worker/model/model_config.h) on
the same Criteo-format text (worker/data/criteo_format.h), in one process with
the embeddings inside TensorFlow, and prints one JSON line with throughput and
holdout quality:

  build/keras-venv/bin/python bench/keras_dlrm.py \
      --train /tmp/d/train.tsv --holdout /tmp/d/train.tsv.holdout

Setup: python3 -m venv build/keras-venv &&
       build/keras-venv/bin/pip install -r bench/requirements-keras.txt

Data. Each line is "label \\t I1..I13 \\t C1..C26". Integers (empty -> 0) are
transformed as log(1 + max(x, 0)); categoricals are 8 hex digits or empty;
missing trailing fields read as empty; a malformed line (more than 40 fields,
a bad label, integer or hex field) is skipped and counted, as Strata's
CriteoReader does, or stops the run with --strict. The files are parsed into numpy arrays before training; that time is reported as
parse_seconds and is not part of train_seconds or samples_per_second.

Embeddings. The C++ worker hashes (field, value) into a uint64 key of one big
table on the parameter servers. Here every field gets its own vocabulary,
built from the training file: row 0 of a field is its reserved OOV row, rows
1..n its n distinct training values. An empty C field is one of those values
(C++ gives it its own trained "missing" key, CriteoMissingKey), so only a
value never seen in training (holdout only) maps to the OOV row, which is
never trained and keeps its initial value -- as a key first pulled at
evaluation time keeps its initial value on a Strata server. The 26 per-field
tables are stored as disjoint row ranges of one variable (field f's rows start
at offset[f]) so that a batch is one gather instead of 26; that is the same
model as 26 separate tables. Initializer: truncated normal (cut at two
standard deviations, as Strata's) with stddev --emb_init_scale, or uniform in
+-scale with --emb_init=uniform.

Model (defaults in brackets, as in ModelConfig):
  bottom = MLP(13 dense -> --bottom_hidden [64] -> --embedding_dim [16]),
           ReLU after every layer;
  z      = "dot": [bottom, <v_i, v_j> for i < j], v = (bottom, e_1..e_26),
                  width 16 + 27*26/2 = 367;
           "concat": [bottom, e_1, .., e_26];
  logit  = MLP(z -> --top_hidden [128,64] (ReLU) -> 1);
  loss   = mean sigmoid cross-entropy from logits over the batch (the C++
           model's summed gradients divided by the example count).
Dense weights Glorot uniform, biases zero (Keras Dense defaults).

Wide term (--wide), as strata-worker --wide: one weight per row of the
table (a [rows, 1] variable, zeros at first), an example's 26 weights summed
into its logit; the weights take the same sparse Adagrad at --wide_lr.

Optimizers: two, on separate variable lists, applied in one compiled step.
  dense: keras.optimizers.Adam(--dense_lr [1e-3], beta 0.9/0.999, eps 1e-7);
  embeddings: a sparse Adagrad written here with Strata's rule
    (embedding/optimizer.h): a += g^2; w -= lr * g / (sqrt(a) + eps), a starts
    at --emb_init_acc [0.1], eps 1e-7, lr --emb_lr [0.05]. Only the rows of
    the batch are read and written (duplicates summed first), as a push to a
    Strata server does; Keras' own Adagrad would update the whole table
    densely each step.
The step is a tf.function; with --jit the dense forward/backward (MLPs,
interaction, loss) is XLA-compiled, while the gather and the sparse update,
whose shapes vary with the batch's distinct rows, stay outside XLA.

Output: progress lines on stderr every --log_every_s seconds (step,
samples/s, loss), then one JSON line on stdout. train_seconds runs from the
first step to the last, the first step's tracing included
(samples_per_second_after_first_step leaves it out); holdout AUC is exact
(Mann-Whitney, tied scores at midranks), holdout log loss is from the logits.
--intra_op_threads / --inter_op_threads pin TensorFlow's thread pools (0, the
default, lets TF use one thread per schedulable CPU); the JSON reports them and
the CPUs available. The planted model's holdout AUC and log loss are copied
from strata-datagen's <train>.meta.json when it is there.

Written against Keras 3 (what tensorflow-cpu 2.16+ brings); the Keras API used
(Sequential, Dense, Adam.build/apply_gradients) is the same in tf.keras 2.
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
EMPTY = -1  # categorical code of an empty C field (hex values are >= 0)


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--train", required=True, help="Criteo-format training file")
    p.add_argument("--holdout", required=True, help="Criteo-format holdout file")
    p.add_argument("--meta", default="auto",
                   help="strata-datagen's <train>.meta.json to copy the planted "
                        "AUC from; 'auto' looks beside --train, '' skips")
    p.add_argument("--max_train_rows", type=int, default=0,
                   help="read at most this many training rows (0: all)")
    p.add_argument("--max_holdout_rows", type=int, default=0,
                   help="read at most this many holdout rows (0: all)")
    p.add_argument("--strict", action="store_true",
                   help="stop at a malformed line instead of skipping it")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--bottom_hidden", default="64",
                   help="comma-separated hidden widths of the bottom MLP")
    p.add_argument("--top_hidden", default="128,64",
                   help="comma-separated hidden widths of the top MLP")
    p.add_argument("--interaction", choices=["dot", "concat"], default="dot")
    p.add_argument("--emb_init", choices=["truncated_normal", "uniform"],
                   default="truncated_normal")
    p.add_argument("--emb_init_scale", type=float, default=0.01,
                   help="stddev (truncated_normal) or half-width (uniform)")
    p.add_argument("--emb_lr", type=float, default=0.05,
                   help="Adagrad learning rate of the embeddings")
    p.add_argument("--emb_init_acc", type=float, default=0.1,
                   help="Adagrad initial accumulator of the embeddings")
    p.add_argument("--emb_eps", type=float, default=1e-7)
    p.add_argument("--dense_lr", type=float, default=1e-3,
                   help="Adam learning rate of the MLPs")
    p.add_argument("--wide", action="store_true",
                   help="add strata-worker --wide's first-order term: one "
                        "weight per feature value (zeros at first, the same "
                        "sparse Adagrad), summed into the logit")
    p.add_argument("--wide_lr", type=float, default=0,
                   help="Adagrad learning rate of the wide weights "
                        "(0: --emb_lr)")
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--eval_batch_size", type=int, default=16384)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--shuffle_buffer", type=int, default=0,
                   help="tf.data shuffle buffer in rows (0: file order)")
    p.add_argument("--jit", action="store_true",
                   help="XLA-compile the dense forward/backward")
    p.add_argument("--intra_op_threads", type=int, default=0,
                   help="TensorFlow intra-op threads (0: TF default)")
    p.add_argument("--inter_op_threads", type=int, default=0,
                   help="TensorFlow inter-op threads (0: TF default)")
    p.add_argument("--log_every_s", type=float, default=10.0,
                   help="seconds between progress lines on stderr (0: none)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    args.bottom_hidden = parse_widths(p, "--bottom_hidden", args.bottom_hidden)
    args.top_hidden = parse_widths(p, "--top_hidden", args.top_hidden)
    for name in ("embedding_dim", "batch_size", "eval_batch_size", "epochs"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be positive")
    return args


def parse_widths(parser, flag, text):
    try:
        widths = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        parser.error(f"{flag}: {text!r} is not a comma-separated list of ints")
    if any(w < 1 for w in widths):
        parser.error(f"{flag}: widths must be positive")
    return widths


# ---------------------------------------------------------------------------
# Data


_HEX_DIGITS = b"0123456789abcdefABCDEF"
_DEC_DIGITS = b"0123456789"


def parse_int(text):
    """ParseCriteoInteger: empty -> 0, else an optional '-' and 1..18 digits."""
    if not text:
        return 0
    digits = text[1:] if text[:1] == b"-" else text
    if not digits or len(digits) > 18 or digits.strip(_DEC_DIGITS):
        raise ValueError(text)
    return int(text)


def parse_hex(text):
    """ParseCriteoHex: empty -> EMPTY, else exactly 8 hex digits."""
    if not text:
        return EMPTY
    if len(text) != 8 or text.strip(_HEX_DIGITS):
        raise ValueError(text)
    return int(text, 16)


def parse_line(line):
    """ParseCriteoLine: (label, ints, codes), or ValueError naming the field."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    fields = line.split(b"\t")
    if len(fields) > NUM_COLUMNS:
        raise ValueError(f"more than {NUM_COLUMNS} fields")
    if len(fields) < NUM_COLUMNS:
        fields += [b""] * (NUM_COLUMNS - len(fields))
    label = fields[0]
    if label != b"0" and label != b"1":
        raise ValueError(f"label {label!r} is not 0 or 1")
    try:
        ints = [parse_int(s) for s in fields[1:1 + NUM_DENSE]]
    except ValueError as e:
        raise ValueError(f"I field {e} is not an integer")
    try:
        codes = [parse_hex(s) for s in fields[1 + NUM_DENSE:]]
    except ValueError as e:
        raise ValueError(f"C field {e} is not 8 hex digits")
    return label == b"1", ints, codes


def read_criteo(path, max_rows=0, strict=False):
    """Returns (labels float32 [n], dense float32 [n, 13], codes int64 [n, 26],
    malformed line count).

    codes hold each C field's hex value, or EMPTY for an empty field. As
    Strata's CriteoReader, a malformed line is skipped and counted, or with
    strict raises ValueError naming file:line.
    """
    labels, ints, codes = [], [], []
    malformed = 0
    with open(path, "rb") as f:  # lines end at b"\n" only, as in C++
        for line_no, line in enumerate(f, 1):
            if max_rows and len(labels) >= max_rows:
                break
            try:
                label, row_ints, row_codes = parse_line(line)
            except ValueError as e:
                if strict:
                    raise ValueError(f"{path}:{line_no}: {e}") from None
                if malformed < 5:
                    log(f"{path}:{line_no}: skipping malformed line: {e}")
                malformed += 1
                continue
            labels.append(label)
            ints.append(row_ints)
            codes.append(row_codes)
    n = len(labels)
    labels = np.asarray(labels, dtype=np.float32)
    ints = np.asarray(ints, dtype=np.int64).reshape(n, NUM_DENSE)
    # CriteoDenseTransform: log1p in double, then float.
    dense = np.log1p(np.maximum(ints, 0).astype(np.float64)).astype(np.float32)
    codes = np.asarray(codes, dtype=np.int64).reshape(n, NUM_FIELDS)
    return labels, dense, codes, malformed


def build_vocabularies(train_codes):
    """Per field: the sorted distinct training codes and the field's first row.

    Field f owns rows [offsets[f], offsets[f] + 1 + len(vocabs[f])): its OOV
    row, then one row per distinct value.
    """
    vocabs = [np.unique(train_codes[:, f]) for f in range(NUM_FIELDS)]
    sizes = np.array([1 + len(v) for v in vocabs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return vocabs, offsets, int(sizes.sum())


def to_rows(codes, vocabs, offsets):
    """Global table rows int32 [n, 26]; values outside the vocabulary -> OOV."""
    rows = np.empty(codes.shape, dtype=np.int64)
    for f, vocab in enumerate(vocabs):
        col = codes[:, f]
        pos = np.searchsorted(vocab, col)
        found = vocab[np.minimum(pos, len(vocab) - 1)] == col
        rows[:, f] = offsets[f] + np.where(found, pos + 1, 0)
    if rows.max(initial=0) >= np.iinfo(np.int32).max:
        raise ValueError("embedding table too large for int32 row ids")
    return rows.astype(np.int32), float(1.0 - np.mean(rows != offsets[None, :]))


# ---------------------------------------------------------------------------
# Metrics


def exact_auc(labels, scores):
    """ROC AUC by the Mann-Whitney U statistic, tied scores at midranks."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Runs of equal scores: [starts[k], ends[k]) in sorted order.
    boundary = np.concatenate([[True], sorted_scores[1:] != sorted_scores[:-1]])
    starts = np.flatnonzero(boundary)
    ends = np.concatenate([starts[1:], [scores.size]])
    midranks = (starts + ends + 1) / 2.0  # mean of 1-based ranks start+1..end
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.repeat(midranks, ends - starts)
    rank_sum = ranks[labels].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def log_loss_from_logits(labels, logits):
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def read_planted(meta_arg, train_path):
    path = train_path + ".meta.json" if meta_arg == "auto" else meta_arg
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            meta = json.load(f)
        holdout = meta.get("holdout") or {}
        out = {}
        if "planted_auc" in holdout:
            out["planted_holdout_auc"] = holdout["planted_auc"]
            out["planted_holdout_log_loss"] = holdout.get("planted_log_loss")
        return out
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------------
# Model and training


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf
    import keras

    # Before any TensorFlow op runs.
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    keras.utils.set_random_seed(args.seed)

    t0 = time.perf_counter()
    y_train, x_train, c_train, bad_train = read_criteo(
        args.train, args.max_train_rows, args.strict)
    y_hold, x_hold, c_hold, bad_hold = read_criteo(
        args.holdout, args.max_holdout_rows, args.strict)
    vocabs, offsets, table_rows = build_vocabularies(c_train)
    r_train, _ = to_rows(c_train, vocabs, offsets)
    r_hold, hold_oov = to_rows(c_hold, vocabs, offsets)
    del c_train, c_hold
    parse_seconds = time.perf_counter() - t0
    n_train, n_hold = len(y_train), len(y_hold)
    if n_train == 0 or n_hold == 0:
        raise SystemExit("keras_dlrm: empty training or holdout file")
    log(f"parsed {n_train} train + {n_hold} holdout rows in {parse_seconds:.2f} s; "
        f"{table_rows} embedding rows; holdout OOV fraction {hold_oov:.4f}")

    dim = args.embedding_dim
    # Dense parts: Keras layers, Glorot-uniform kernels and zero biases.
    def dense_layer(width, activation):
        return keras.layers.Dense(width, activation=activation,
                                  kernel_initializer="glorot_uniform",
                                  bias_initializer="zeros")

    bottom = keras.Sequential(
        [keras.Input(shape=(NUM_DENSE,))] +
        [dense_layer(w, "relu") for w in args.bottom_hidden + [dim]],
        name="bottom_mlp")
    if args.interaction == "dot":
        num_vectors = NUM_FIELDS + 1
        iu, ju = np.triu_indices(num_vectors, k=1)
        pair_index = tf.constant(iu * num_vectors + ju, dtype=tf.int32)
        interaction_width = dim + len(iu)
    else:
        interaction_width = dim + NUM_FIELDS * dim
    top = keras.Sequential(
        [keras.Input(shape=(interaction_width,))] +
        [dense_layer(w, "relu") for w in args.top_hidden] +
        [dense_layer(1, None)],
        name="top_mlp")
    dense_vars = bottom.trainable_variables + top.trainable_variables
    dense_params = int(sum(np.prod(v.shape) for v in dense_vars))

    # The embedding tables (one variable, per-field row ranges) and their
    # Adagrad accumulators: plain tf.Variables, updated sparsely below.
    if args.emb_init == "truncated_normal":
        init = tf.random.truncated_normal([table_rows, dim], stddev=args.emb_init_scale,
                                          seed=args.seed)
    else:
        init = tf.random.uniform([table_rows, dim], -args.emb_init_scale,
                                 args.emb_init_scale, seed=args.seed)
    table = tf.Variable(init, name="embeddings")
    accumulator = tf.Variable(tf.fill([table_rows, dim], args.emb_init_acc),
                              name="embeddings_adagrad")
    del init

    # The wide term: one weight per row, and its Adagrad accumulator.
    wide_weights = wide_accumulator = None
    if args.wide:
        wide_weights = tf.Variable(tf.zeros([table_rows, 1]), name="wide")
        wide_accumulator = tf.Variable(
            tf.fill([table_rows, 1], args.emb_init_acc), name="wide_adagrad")
    wide_lr = tf.constant(args.wide_lr or args.emb_lr, tf.float32)

    adam = keras.optimizers.Adam(learning_rate=args.dense_lr, beta_1=0.9,
                                 beta_2=0.999, epsilon=1e-7)
    adam.build(dense_vars)
    emb_lr = tf.constant(args.emb_lr, tf.float32)
    emb_eps = tf.constant(args.emb_eps, tf.float32)

    def logits_of(dense, emb):
        b = bottom(dense)                                   # [B, dim]
        if args.interaction == "dot":
            v = tf.concat([b[:, None, :], emb], axis=1)     # [B, 27, dim]
            gram = tf.matmul(v, v, transpose_b=True)        # [B, 27, 27]
            flat = tf.reshape(gram, [-1, num_vectors * num_vectors])
            z = tf.concat([b, tf.gather(flat, pair_index, axis=1)], axis=1)
        else:
            z = tf.concat([b, tf.reshape(emb, [-1, NUM_FIELDS * dim])], axis=1)
        return tf.squeeze(top(z), axis=1)

    @tf.function(jit_compile=args.jit)
    def dense_forward_backward(dense, emb, wide, labels):
        # wide: [B, 26, 1] weights of the example's rows (zeros without
        # --wide, whose gradient is then unused).
        with tf.GradientTape() as tape:
            tape.watch(emb)
            tape.watch(wide)
            logits = logits_of(dense, emb) + tf.reduce_sum(wide, axis=[1, 2])
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=labels, logits=logits))
        grads = tape.gradient(loss, dense_vars + [emb, wide])
        return loss, grads[:-2], grads[-2], grads[-1]

    def sparse_adagrad(rows, grad, weights, acc, lr):
        width = weights.shape[1]
        flat_rows = tf.reshape(rows, [-1])
        flat_grad = tf.reshape(grad, [-1, width])
        unique_rows, position = tf.unique(flat_rows)
        g = tf.math.unsorted_segment_sum(flat_grad, position, tf.size(unique_rows))
        a = tf.gather(acc, unique_rows) + g * g
        acc.scatter_update(tf.IndexedSlices(a, unique_rows))
        weights.scatter_sub(tf.IndexedSlices(lr * g / (tf.sqrt(a) + emb_eps),
                                             unique_rows))

    def wide_of(rows):
        if wide_weights is None:
            return tf.zeros([tf.shape(rows)[0], NUM_FIELDS, 1])
        return tf.gather(wide_weights, rows)

    signature = [tf.TensorSpec([None, NUM_DENSE], tf.float32),
                 tf.TensorSpec([None, NUM_FIELDS], tf.int32),
                 tf.TensorSpec([None], tf.float32)]

    @tf.function(input_signature=signature)
    def train_step(dense, rows, labels):
        emb = tf.gather(table, rows)
        loss, dense_grads, emb_grad, wide_grad = dense_forward_backward(
            dense, emb, wide_of(rows), labels)
        adam.apply_gradients(zip(dense_grads, dense_vars))
        sparse_adagrad(rows, emb_grad, table, accumulator, emb_lr)
        if wide_weights is not None:
            sparse_adagrad(rows, wide_grad, wide_weights, wide_accumulator,
                           wide_lr)
        return loss

    @tf.function(input_signature=signature[:2])
    def predict_logits(dense, rows):
        return (logits_of(dense, tf.gather(table, rows)) +
                tf.reduce_sum(wide_of(rows), axis=[1, 2]))

    dataset = tf.data.Dataset.from_tensor_slices((x_train, r_train, y_train))
    if args.shuffle_buffer > 0:
        dataset = dataset.shuffle(args.shuffle_buffer, seed=args.seed,
                                  reshuffle_each_iteration=True)
    dataset = dataset.batch(args.batch_size).prefetch(tf.data.AUTOTUNE)

    log(f"model: dense {NUM_DENSE} -> {args.bottom_hidden + [dim]}, "
        f"{NUM_FIELDS} fields x {dim}, {args.interaction} ({interaction_width}) -> "
        f"{args.top_hidden + [1]}; {dense_params} dense parameters, "
        f"{table_rows * dim} embedding parameters; tensorflow {tf.__version__}, "
        f"keras {keras.__version__}, jit={args.jit}")

    step = 0
    samples = 0
    first_step_seconds = None
    last_epoch_loss = []
    window_losses, window_samples = [], 0
    start = time.perf_counter()
    cpu_start = time.process_time()  # every thread of this process
    window_start = start
    # Each epoch takes its batches by count and never asks the iterator past
    # the last one: in about half the runs here, the request that ends the
    # iteration blocked for ~9 s (until ~20.5 s after the iterator was made,
    # whatever the prefetch buffer), which halved the samples/s measured.
    batches_per_epoch = -(-n_train // args.batch_size)
    for epoch in range(args.epochs):
        epoch_losses = []
        batches = iter(dataset)
        for _ in range(batches_per_epoch):
            dense, rows, labels = next(batches)
            loss = train_step(dense, rows, labels)
            n = int(labels.shape[0])
            step += 1
            samples += n
            window_samples += n
            window_losses.append(loss)
            if first_step_seconds is None:
                loss.numpy()  # the first call traces (and with --jit compiles)
                first_step_seconds = time.perf_counter() - start
                first_step_samples = n
            now = time.perf_counter()
            if args.log_every_s > 0 and now - window_start >= args.log_every_s:
                values = [float(l) for l in window_losses]
                epoch_losses += values
                log(f"epoch {epoch + 1} step {step}: "
                    f"{window_samples / (now - window_start):,.0f} samples/s, "
                    f"loss {np.mean(values):.5f}")
                window_losses, window_samples, window_start = [], 0, now
        epoch_losses += [float(l) for l in window_losses]
        window_losses = []
        last_epoch_loss = epoch_losses
        if args.log_every_s > 0:
            log(f"epoch {epoch + 1} done at step {step}: "
                f"{samples / (time.perf_counter() - start):,.0f} samples/s so far, "
                f"epoch loss {np.mean(epoch_losses):.5f}")
    train_seconds = time.perf_counter() - start
    train_cpu_seconds = time.process_time() - cpu_start

    t1 = time.perf_counter()
    logits = []
    for i in range(0, n_hold, args.eval_batch_size):
        logits.append(predict_logits(x_hold[i:i + args.eval_batch_size],
                                     r_hold[i:i + args.eval_batch_size]).numpy())
    logits = np.concatenate(logits)
    eval_seconds = time.perf_counter() - t1

    result = {
        "framework": "keras",
        "train_rows": n_train,
        "holdout_rows": n_hold,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "steps": step,
        "train_seconds": round(train_seconds, 3),
        "samples_per_second": round(samples / train_seconds, 1),
        "cpu_seconds": round(train_cpu_seconds, 3),
        "first_step_seconds": round(first_step_seconds, 3),
        # The same without the first step (tracing); null for a 1-step run.
        "samples_per_second_after_first_step": (
            round((samples - first_step_samples) /
                  (train_seconds - first_step_seconds), 1)
            if step > 1 else None),
        "holdout_auc": exact_auc(y_hold, logits),
        "holdout_log_loss": log_loss_from_logits(y_hold, logits),
        "train_loss_last_epoch": float(np.mean(last_epoch_loss)),
        "parse_seconds": round(parse_seconds, 3),
        "eval_seconds": round(eval_seconds, 3),
        "holdout_oov_fraction": hold_oov,
        "malformed_lines": bad_train + bad_hold,
        "embedding_rows": table_rows,
        "dense_parameters": dense_params,
        "embedding_dim": dim,
        "interaction": args.interaction,
        "bottom_hidden": args.bottom_hidden,
        "top_hidden": args.top_hidden,
        "emb_lr": args.emb_lr,
        "dense_lr": args.dense_lr,
        "wide": args.wide,
        "wide_lr": (args.wide_lr or args.emb_lr) if args.wide else None,
        "jit": args.jit,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        # 0 means TF's default: as many threads as schedulable CPUs.
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "cpus_available": len(os.sched_getaffinity(0)),
    }
    result.update(read_planted(args.meta, args.train))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
