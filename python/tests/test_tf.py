"""strata.tf (the TF op library and the Keras layer) against live shards.

Values are checked against stratactl (the C++ client) and against numpy
references of the server's optimizers (embedding/optimizer.cc). Skipped when
tensorflow is not importable; a missing op library fails (build it:
make -C build strata_tf_ops, configured with a Python that has tensorflow).
"""

import ctypes
import json
import shutil
import subprocess
import time

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="tensorflow is not installed in this Python "
    "(python/run_tests.sh installs tensorflow-cpu)")
keras = pytest.importorskip("keras")

import strata.tf as stf  # noqa: E402  (needs tensorflow)
from strata_cluster import Cluster  # noqa: E402

BIG = 2**64 - 5  # above 2^63: a negative int64, bit for bit


@pytest.fixture(scope="module", autouse=True)
def op_library():
    try:
        path = stf.library_path()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    stf.load_ops()
    return path


@pytest.fixture(scope="module")
def shards(shard_addresses):
    return ",".join(shard_addresses)


def as_int64(keys):
    return np.asarray(keys, dtype=np.uint64).view(np.int64)


def pull_with_stratactl(stratactl, table, keys):
    doc = json.loads(stratactl("--json", "pull", table,
                               ",".join(str(int(k)) for k in keys)))
    return np.array([row["values"] for row in doc["rows"]], np.float32)


def pull(table, dim, shards, keys):
    return stf.lookup(as_int64(keys), table, dim, shards).numpy()


def test_lookup_equals_stratactl_pull_for_any_id_shape(shards, stratactl):
    stf.create_table("tf_lookup", 5, shards, initializer="truncated_normal",
                     initializer_args={"stddev": 0.3}, seed=7)
    keys = np.array([[3, BIG, 3], [2**63, 0, 17]], np.uint64)  # [2, 3]
    rows = stf.lookup(tf.constant(keys.view(np.int64)), "tf_lookup", 5,
                      shards)
    assert rows.shape == (2, 3, 5) and rows.dtype == tf.float32
    expected = pull_with_stratactl(stratactl, "tf_lookup", keys.reshape(-1))
    np.testing.assert_array_equal(rows.numpy().reshape(6, 5), expected)
    assert np.any(expected != 0)  # the initializer ran: a real comparison
    # uint64 tensors are taken bit for bit; a scalar id gives one row.
    np.testing.assert_array_equal(
        stf.lookup(tf.constant(keys), "tf_lookup", 5, shards).numpy(),
        rows.numpy())
    np.testing.assert_array_equal(
        stf.lookup(tf.constant(17, tf.int64), "tf_lookup", 5, shards).numpy(),
        expected[5])
    np.testing.assert_array_equal(
        stf.lookup(tf.constant([17, 3], tf.int32), "tf_lookup", 5,
                   shards).numpy(), expected[[5, 0]])
    assert stf.lookup(tf.zeros([0, 4], tf.int64), "tf_lookup", 5,
                      shards).shape == (0, 4, 5)
    traced = tf.function(lambda ids: stf.lookup(ids, "tf_lookup", 5, shards))
    np.testing.assert_array_equal(traced(tf.constant(keys.view(np.int64))),
                                  rows.numpy())


def sgd(rows, grads, lr):
    return rows - np.float32(lr) * grads


def adagrad(rows, grads, lr, initial_accumulator, eps=np.float32(1e-7)):
    acc = np.float32(initial_accumulator) + grads * grads
    return rows - np.float32(lr) * grads / (np.sqrt(acc) + eps)


def summed_per_key(keys, grads, dim):
    unique, inverse = np.unique(keys.reshape(-1), return_inverse=True)
    sums = np.zeros((unique.size, dim), np.float32)
    np.add.at(sums, inverse.reshape(-1), grads.reshape(-1, dim))
    return unique, sums


OPTIMIZERS = {
    "sgd": (dict(optimizer="sgd", learning_rate=0.5),
            lambda rows, g: sgd(rows, g, 0.5)),
    "adagrad": (dict(optimizer="adagrad", learning_rate=0.2,
                     optimizer_args={"initial_accumulator": 0.3}),
                lambda rows, g: adagrad(rows, g, 0.2, 0.3)),
}


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_keras_layer_step_moves_exactly_the_touched_rows(shards, name, traced):
    config, reference = OPTIMIZERS[name]
    table = f"tf_step_{name}_{int(traced)}"
    dim = 4
    layer = stf.Embedding(table, dim, shards=shards, seed=3, **config)
    ids = as_int64([[11, 12, 13], [14, 15, BIG]])
    untouched = [10, 16, 2**63]
    target = tf.constant(np.linspace(-1, 1, 6 * dim, dtype=np.float32)
                         .reshape(2, 3, dim))

    def step(ids):
        with tf.GradientTape() as tape:
            rows = layer(ids)
            loss = tf.reduce_sum(tf.square(rows - target) * 3.0)
        # One backward pass: d loss / d rows (what TF computed) and the push.
        d_rows, d_trigger = tape.gradient(
            loss, [rows] + layer.trainable_weights)
        return d_rows, d_trigger

    layer.build(ids.shape)  # creates the table
    all_keys = np.concatenate([ids.reshape(-1).view(np.uint64),
                               np.array(untouched, np.uint64)])
    before = pull(table, dim, shards, all_keys)
    d_rows, d_trigger = (tf.function(step) if traced else step)(
        tf.constant(ids))
    after = pull(table, dim, shards, all_keys)

    assert float(d_trigger) == 0.0
    d_rows = d_rows.numpy()
    np.testing.assert_allclose(d_rows, 6.0 * (before[:6].reshape(2, 3, dim) -
                                              target.numpy()), rtol=1e-5)
    expected = reference(before[:6], d_rows.reshape(6, dim))
    np.testing.assert_allclose(after[:6], expected, rtol=1e-5, atol=1e-7)
    assert np.all(np.abs(after[:6] - before[:6]) > 1e-4)
    np.testing.assert_array_equal(after[6:], before[6:])


def test_duplicate_ids_are_summed_not_applied_twice(shards):
    dim = 3
    layer = stf.Embedding("tf_dups", dim, shards=shards, optimizer="adagrad",
                          learning_rate=0.5,
                          optimizer_args={"initial_accumulator": 0.1})
    ids = as_int64([[5, 5, 5], [5, 9, 9]])
    layer.build(ids.shape)
    before = pull("tf_dups", dim, shards, [5, 9])
    with tf.GradientTape() as tape:
        rows = layer(tf.constant(ids))
        loss = tf.reduce_sum(rows * tf.reshape(tf.range(18, dtype=tf.float32)
                                               + 1.0, [2, 3, dim]))
    d_rows, _ = tape.gradient(loss, [rows] + layer.trainable_weights)
    after = pull("tf_dups", dim, shards, [5, 9])

    unique, sums = summed_per_key(ids.view(np.uint64), d_rows.numpy(), dim)
    assert unique.tolist() == [5, 9]
    np.testing.assert_allclose(after, adagrad(before, sums, 0.5, 0.1),
                               rtol=1e-5)
    # Applying each occurrence on its own gives other rows: the test tells
    # the two apart.
    one_by_one = before.copy()
    acc = np.full_like(before, 0.1)
    for key, g in zip(ids.view(np.uint64).reshape(-1),
                      d_rows.numpy().reshape(-1, dim)):
        r = 0 if key == 5 else 1
        acc[r] += g * g
        one_by_one[r] -= 0.5 * g / (np.sqrt(acc[r]) + 1e-7)
    assert not np.allclose(after, one_by_one, rtol=1e-3)


def test_model_fit_trains_the_rows_and_the_dense_weights(shards):
    dim = 4
    inputs = keras.Input(shape=(3,), dtype="int64")
    rows = stf.Embedding("tf_fit", dim, shards=shards, optimizer="sgd",
                         learning_rate=0.5)(inputs)
    outputs = keras.layers.Dense(1)(keras.layers.Flatten()(rows))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    assert not model.jit_compile  # the layer has no XLA kernel
    x = as_int64([[1, 2, 3], [4, 5, 6]] * 4)
    y = np.ones((8, 1), np.float32)
    touched, untouched = [1, 2, 3, 4, 5, 6], [7, 8]
    before = pull("tf_fit", dim, shards, touched + untouched)
    kernel = model.layers[-1].kernel.numpy()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # two steps
    after = pull("tf_fit", dim, shards, touched + untouched)
    assert np.all(np.any(after[:6] != before[:6], axis=1))
    np.testing.assert_array_equal(after[6:], before[6:])
    assert np.any(model.layers[-1].kernel.numpy() != kernel)
    prediction = model.predict(x[:2], verbose=0)
    assert prediction.shape == (2, 1) and np.all(np.isfinite(prediction))
    layer = model.layers[1]
    again = stf.Embedding.from_config(layer.get_config())
    assert again.get_config() == layer.get_config()
    assert again.table == "tf_fit" and again.dim == dim


def test_savedmodel_and_checkpoint_work_in_a_process_using_the_op(
        shards, tmp_path):
    stf.create_table("tf_saved", 2, shards, initializer="uniform",
                     initializer_args={"min": -1, "max": 1})
    ids = as_int64([1, 2, 3])
    first = pull("tf_saved", 2, shards, ids.view(np.uint64))

    class Scorer(tf.Module):
        def __init__(self):
            super().__init__()
            self.scale = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
        def score(self, ids):
            rows = stf.lookup(ids, "tf_saved", 2, shards)
            return tf.reduce_sum(rows, axis=1) * self.scale

    scorer = Scorer()
    # TensorFlow's own protobuf, heavily: a SavedModel and checkpoints.
    tf.saved_model.save(scorer, str(tmp_path / "saved"))
    checkpoint = tf.train.Checkpoint(scorer=scorer)
    path = checkpoint.write(str(tmp_path / "ckpt" / "c"))
    scorer.scale.assign(5.0)
    checkpoint.read(path).assert_consumed()
    assert float(scorer.scale) == 2.0
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(loaded.score(tf.constant(ids)).numpy(),
                               first.sum(axis=1) * 2.0, rtol=1e-6)
    np.testing.assert_array_equal(
        pull("tf_saved", 2, shards, ids.view(np.uint64)), first)


def test_client_is_loaded_with_one_libc_and_out_of_the_global_scope(shards):
    stf.create_table("tf_scope", 2, shards)
    assert pull("tf_scope", 2, shards, [1]).shape == (1, 2)
    maps = open("/proc/self/maps").read().splitlines()
    # Debian's protobuf and gRPC are loaded (by the client library) ...
    for soname in ("libprotobuf.so.32", "libgrpc++.so.1.51"):
        assert any(line.endswith(soname) or soname + "." in line
                   for line in maps), soname
    # ... but not into the global scope: neither the client's C ABI nor
    # Debian's protobuf resolves from there.
    everything = ctypes.CDLL(None)
    assert not hasattr(everything, "strata_tf_pull")
    # One libc: its code is mapped once (a link namespace would map it twice).
    libc_code = {line.split()[0] for line in maps
                 if "r-xp" in line and "/libc.so.6" in line}
    assert len(libc_code) == 1, libc_code


@pytest.mark.skipif(not (shutil.which("readelf") and shutil.which("nm")),
                    reason="readelf/nm (binutils) not installed")
def test_op_library_links_no_grpc_and_client_exports_only_its_c_abi(
        op_library):
    needed = subprocess.run(["readelf", "-d", str(op_library)], check=True,
                            capture_output=True, text=True).stdout
    assert "libtensorflow_framework" in needed
    for banned in ("grpc", "protobuf", "absl"):
        assert banned not in needed, needed
    client = op_library.parent / "libstrata_tf_client.so"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(client)],
                             check=True, capture_output=True,
                             text=True).stdout.split("\n")
    names = [line.split()[-1] for line in symbols if line.strip()]
    exported = [n for n in names if n != "STRATA_TF_CLIENT_1"]
    assert exported and all(n.startswith("strata_tf_") for n in exported), \
        exported


def test_unknown_table_is_not_found_with_the_ps_message(shards):
    with pytest.raises(tf.errors.NotFoundError,
                       match="unknown table 'tf_nope'"):
        stf.lookup(as_int64([1]), "tf_nope", 4, shards)
    with pytest.raises(tf.errors.NotFoundError, match="tf_nope"):
        stf.push(as_int64([1]), tf.ones([1, 4]), "tf_nope", 4, shards)
    traced = tf.function(lambda ids: stf.lookup(ids, "tf_nope", 4, shards))
    with pytest.raises(tf.errors.NotFoundError, match="tf_nope"):
        traced(tf.constant(as_int64([1, 2])))


def test_table_config_and_dimension_mismatches_are_errors(shards):
    stf.create_table("tf_conf", 4, shards, optimizer="sgd", learning_rate=1)
    stf.create_table("tf_conf", 4, shards, optimizer="sgd", learning_rate=1)
    with pytest.raises(tf.errors.AlreadyExistsError, match="tf_conf"):
        stf.create_table("tf_conf", 4, shards, optimizer="adam")
    with pytest.raises(tf.errors.InvalidArgumentError):
        stf.lookup(as_int64([1]), "tf_conf", 3, shards)
    with pytest.raises(ValueError, match="optimizer"):
        stf.Embedding("tf_conf", 4, shards=shards, optimizer="rmsprop")


def test_ps_down_past_the_retry_deadline_is_a_tf_error(tmp_path):
    cluster = Cluster("strata-py-tf-down-")
    try:
        shard = cluster.start_shard("down")
        address = shard.wait_ready()
        short = dict(rpc_timeout=1.0, retry_deadline=1.5)
        stf.create_table("tf_down", 2, address, **short)
        assert pull("tf_down", 2, address, [1]).shape == (1, 2)
        shard.proc.kill()
        shard.proc.wait(10)
        begin = time.monotonic()
        with pytest.raises((tf.errors.UnavailableError,
                            tf.errors.DeadlineExceededError),
                           match="tf_down"):
            stf.lookup(as_int64([1, 2]), "tf_down", 2, address, **short)
        with pytest.raises((tf.errors.UnavailableError,
                            tf.errors.DeadlineExceededError)):
            stf.push(as_int64([1]), tf.ones([1, 2]), "tf_down", 2, address,
                     **short)
        assert time.monotonic() - begin < 20
    finally:
        cluster.stop()
