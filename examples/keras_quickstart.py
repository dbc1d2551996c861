#!/usr/bin/env python3
"""strata.tf in one page: train a Keras model whose embeddings live on a
Strata training cluster, checkpoint it, and export it to serve from
strata-serving alone.

  pip install ./python tensorflow-cpu   # the op library builds at first import
  strata-server --port=50051 --data_dir=/tmp/ps &
  strata-serving --port=50061 --shards=127.0.0.1:50051 --data_dir=/tmp/sv &
  python keras_quickstart.py --shards=127.0.0.1:50051 \\
      --serving=127.0.0.1:50061 --out=/tmp/quickstart

Model: a user id (one-hot) and the ids of the items the user clicked (a
multi-hot feature padded with -1, mean-pooled), each an embedding table on the PS;
a dense layer on top. Labels are planted: a click when the user id and the
first item are both even. Prints one JSON line: losses per epoch, the
checkpoints taken, and whether the served model answers as the trained one.
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

import strata.tf


def data(n=2048, seed=0):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 200, size=(n, 1)).astype(np.int64)
    items = [list(rng.integers(0, 500, size=rng.integers(1, 8)))
             for _ in range(n)]
    labels = np.array([[float(u[0] % 2 == 0 and i[0] % 2 == 0)]
                       for u, i in zip(users, items)], np.float32)
    padded = np.full((n, 7), -1, np.int64)
    for row, ids in enumerate(items):
        padded[row, :len(ids)] = ids
    return users, padded, labels


def model(shards):
    user = keras.Input(shape=(1,), dtype="int64", name="user")
    # Padded with -1: a serving signature takes a matrix, not a ragged
    # tensor (tf.RaggedTensor works in training, see python/README.md).
    items = keras.Input(shape=(None,), dtype="int64", name="items")
    user_rows = strata.tf.Embedding("quickstart_user", 8, shards=shards)(user)
    item_rows = strata.tf.Embedding("quickstart_items", 8, shards=shards,
                                    combiner="mean", padding_id=-1)(items)
    x = keras.layers.Concatenate()([keras.layers.Flatten()(user_rows),
                                    item_rows])
    x = keras.layers.Dense(16, activation="relu")(x)
    out = keras.layers.Dense(1, activation="sigmoid")(x)
    m = keras.Model([user, items], out)
    m.compile(optimizer=keras.optimizers.Adam(1e-2),
              loss="binary_crossentropy")
    return m


def wait_until_served(shards, serving, timeout=60.0):
    """The serving PS follows the shards' change stream: wait until it has
    every row the model reads as the shards hold it."""
    for table, keys in (("quickstart_user", np.arange(200)),
                        ("quickstart_items", np.arange(500))):
        want = strata.tf.lookup(keys, table, 8, shards).numpy()
        deadline = time.monotonic() + timeout
        while not np.array_equal(
                strata.tf.serving_lookup(keys, table, 8, serving).numpy(),
                want):
            if time.monotonic() > deadline:
                raise TimeoutError(f"strata-serving behind on {table}")
            time.sleep(0.1)


def main():
    flags = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    flags.add_argument("--shards", required=True)
    flags.add_argument("--serving", required=True)
    flags.add_argument("--out", required=True)
    flags.add_argument("--epochs", type=int, default=4)
    args = flags.parse_args()

    users, items, labels = data()
    trained = model(args.shards)
    saver = strata.tf.CheckpointCallback(
        args.shards, os.path.join(args.out, "checkpoints"),
        prefix=f"quickstart-{int(time.time())}-")
    history = trained.fit({"user": users, "items": items}, labels,
                          epochs=args.epochs, batch_size=64, verbose=0,
                          callbacks=[saver])
    wait_until_served(args.shards, args.serving)
    exported = os.path.join(args.out, "served")
    strata.tf.export_for_serving(trained, exported, args.serving)

    # What a serving job does: load the op library and the SavedModel.
    served = tf.saved_model.load(exported)
    want = trained.predict({"user": users[:64], "items": items[:64]},
                           verbose=0)
    got = served.serve([tf.constant(users[:64]),
                        tf.constant(items[:64])]).numpy()
    print(json.dumps({"losses": history.history["loss"],
                      "checkpoints": saver.saved,
                      "served_equals_trained": bool(
                          np.allclose(got, want, atol=1e-6))}))


if __name__ == "__main__":
    main()
