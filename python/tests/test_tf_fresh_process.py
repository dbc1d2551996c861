"""Every way users run TensorFlow over Strata, each in a FRESH Python process.

A user's job starts a new process, and what breaks can depend on what ran
first in it (the op library once crashed in tf.function unless a
create_table op had run before). So each case here is a script run by a new
interpreter against the live two-shard cluster: it asserts the values it
gets and prints one JSON line, which the test checks again. A crash is a
non-zero exit with the script's output in the failure.
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="tensorflow is not installed in this Python "
    "(python/run_tests.sh installs tensorflow-cpu)")

import strata.tf as stf  # noqa: E402  (needs tensorflow)
from fresh_process import finish_script, start_script  # noqa: E402
from strata_cluster import REPO, Cluster, binary  # noqa: E402

CASE_TIMEOUT = 240

# Imported by every case after fresh_process.CASE_HEADER (SHARDS, TABLE,
# WORK, report): keras_model(): ids [batch, 2] -> a click probability.
PRELUDE = '''
import tensorflow as tf
import keras
import strata.tf as stf

def ids_and_labels(n=256, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, size=(n, 2)).astype(np.int64)
    labels = ((ids[:, 0] % 2) == 0).astype(np.float32).reshape(-1, 1)
    return ids, labels

def keras_model(table=TABLE, create_table=True, **layer_args):
    ids = keras.Input(shape=(2,), dtype="int64")
    rows = stf.Embedding(table, 4, shards=SHARDS, create_table=create_table,
                         seed=3, **layer_args)(ids)
    x = keras.layers.Flatten()(rows)
    out = keras.layers.Dense(1, activation="sigmoid",
                             kernel_initializer="ones")(x)
    model = keras.Model(ids, out)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss="binary_crossentropy")
    return model
'''


def start_case(body, shards, table, workdir, env=None):
    """Starts the case header, PRELUDE and body in a new interpreter in the
    background, with `env` added to its environment; returns (process, log
    path). The caller waits for it with finish_case."""
    return start_script(PRELUDE, body, shards, table, workdir,
                        dict({"TF_CPP_MIN_LOG_LEVEL": "2"}, **(env or {})))


def finish_case(process, log_path):
    """Waits for a start_case process; returns (its RESULT dict, its log)."""
    return finish_script(process, log_path, CASE_TIMEOUT)


def run_case(body, shards, table, workdir, env=None):
    """Runs PRELUDE + body in a new interpreter; returns its RESULT dict."""
    return finish_case(*start_case(body, shards, table, workdir, env))[0]


@pytest.fixture(scope="module")
def shards(shard_addresses):
    return ",".join(shard_addresses)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tf-fresh")


def pull(shards, table, keys, dim):
    """Rows read in this (test) process, for comparison with a case's."""
    stf.load_ops()
    return stf.lookup(np.asarray(keys, np.int64), table, dim, shards).numpy()


def create_sgd_table(shards, table, dim=4):
    stf.create_table(table, dim, shards, optimizer="sgd", learning_rate=1.0)


LOOKUPS = {
    "eager": "rows = stf.lookup(ids, TABLE, 4, SHARDS)",
    "tf_function": """
        rows = tf.function(lambda i: stf.lookup(i, TABLE, 4, SHARDS))(ids)""",
    "tf_function_after_eager": """
        stf.lookup(ids, TABLE, 4, SHARDS)
        rows = tf.function(lambda i: stf.lookup(i, TABLE, 4, SHARDS))(ids)""",
    "tf_function_after_create_table": """
        stf.create_table(TABLE, 4, SHARDS, optimizer="sgd", learning_rate=1)
        rows = tf.function(lambda i: stf.lookup(i, TABLE, 4, SHARDS))(ids)""",
    "tf1_session": """
        with tf.Graph().as_default():
            lookup = stf.lookup(tf.constant(ids), TABLE, 4, SHARDS)
            with tf.compat.v1.Session() as session:
                rows = session.run(lookup)""",
}


@pytest.mark.parametrize("how", sorted(LOOKUPS))
def test_lookup_in_a_fresh_process(shards, workdir, how):
    table = f"fresh_lookup_{how}"
    create_sgd_table(shards, table)
    stf.push(np.array([5, 9], np.int64), tf.ones([2, 4]), table, 4, shards)
    body = "\n".join([
        "ids = np.array([5, 9, 11], np.int64)",
        textwrap.dedent(LOOKUPS[how]).strip(),
        "report(rows=np.asarray(rows).tolist())"])
    got = np.array(run_case(body, shards, table, workdir)["rows"])
    np.testing.assert_array_equal(got, pull(shards, table, [5, 9, 11], 4))
    np.testing.assert_array_equal(got[0], [-1.0] * 4)  # one SGD step of 1
    np.testing.assert_array_equal(got[2], [0.0] * 4)


def test_tf1_session_push_applies_the_gradient(shards, workdir):
    table = "fresh_tf1_push"
    create_sgd_table(shards, table)
    body = """
        with tf.Graph().as_default():
            ids = tf.constant([3, 3, 4], tf.int64)
            done = stf.push(ids, tf.fill([3, 4], 0.5), TABLE, 4, SHARDS)
            with tf.compat.v1.Session() as session:
                session.run(done)
        report(ok=True)
    """
    assert run_case(body, shards, table, workdir)["ok"]
    # Key 3's two gradients are summed: one step of 1.0.
    np.testing.assert_array_equal(pull(shards, table, [3, 4], 4),
                                  [[-1.0] * 4, [-0.5] * 4])


def test_fit_evaluate_predict_and_tf_data(shards, workdir):
    body = """
        ids, labels = ids_and_labels()
        model = keras_model()
        before = model.evaluate(ids, labels, verbose=0)
        rows_before = stf.lookup(ids[:4], TABLE, 4, SHARDS).numpy()
        data = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(32)
        history = model.fit(data, epochs=4, verbose=0)
        after = model.evaluate(data, verbose=0)
        rows_after = stf.lookup(ids[:4], TABLE, 4, SHARDS).numpy()
        predicted = model.predict(ids[:8], verbose=0)
        direct = model(ids[:8]).numpy()
        assert not np.array_equal(rows_before, rows_after), "rows never moved"
        np.testing.assert_allclose(predicted, direct, atol=1e-6)
        report(before=before, after=after, losses=history.history["loss"],
               predicted=predicted.reshape(-1).tolist())
    """
    got = run_case(body, shards, "fresh_fit", workdir)
    assert got["after"] < got["before"] - 0.05, got
    assert got["losses"][-1] < got["losses"][0], got
    assert len(got["predicted"]) == 8


def test_custom_gradient_tape_loop_pushes_exact_gradients(shards, workdir):
    table = "fresh_tape"
    create_sgd_table(shards, table)
    body = """
        layer = stf.Embedding(TABLE, 4, shards=SHARDS, create_table=False)
        ids = tf.constant([[1, 2], [2, 7]], tf.int64)
        weights = tf.constant([1.0, 2.0, 3.0, 4.0])
        for step in range(3):
            with tf.GradientTape() as tape:
                rows = layer(ids)               # [2, 2, 4]
                loss = tf.reduce_sum(rows * weights)
            tape.gradient(loss, layer.trainable_variables)
        report(ok=True)
    """
    assert run_case(body, shards, table, workdir)["ok"]
    w = np.array([1.0, 2.0, 3.0, 4.0])
    # Per step, each occurrence adds `w` to its key's gradient (SGD, lr 1).
    np.testing.assert_allclose(pull(shards, table, [1, 2, 7], 4),
                               [-3 * w, -6 * w, -3 * w], atol=1e-6)


BACKGROUND_PUSHES = """
    layer = stf.Embedding(TABLE, 4, shards=SHARDS, create_table=False,
                          push_staleness=2)
    ids = tf.constant([[1, 2], [2, 7]], tf.int64)
    weights = tf.constant([1.0, 2.0, 3.0, 4.0])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            rows = layer(ids, training=True)  # may miss the last 2 pushes
            loss = tf.reduce_sum(rows * weights)
        return tape.gradient(loss, layer.trainable_variables)

    for _ in range(int(os.environ["STRATA_TEST_STEPS"])):
        step()
    if os.environ.get("STRATA_TEST_LOOK_UP"):
        # Not training: waits for the queued pushes first.
        report(after=layer(ids[:1]).numpy().tolist())
    else:
        report(after=None)  # and exit with pushes possibly queued
"""


def test_background_pushes_all_land_are_waited_for_and_finish_at_exit(
        shards, workdir):
    table = "fresh_async"
    create_sgd_table(shards, table)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    got = run_case(BACKGROUND_PUSHES, shards, table, workdir,
                   env={"STRATA_TEST_STEPS": "10", "STRATA_TEST_LOOK_UP": "1"})
    # SGD, lr 1: each occurrence of a key adds `w` to its gradient per step.
    np.testing.assert_allclose(got["after"], [[-10 * w, -20 * w]], atol=1e-6)
    run_case(BACKGROUND_PUSHES, shards, table, workdir,
             env={"STRATA_TEST_STEPS": "5"})
    np.testing.assert_allclose(pull(shards, table, [1, 2, 7], 4),
                               [-15 * w, -30 * w, -15 * w], atol=1e-6)


WIRE_FLOAT16 = """
    ids = np.arange(1, 9, dtype=np.int64)
    exact = stf.lookup(ids, TABLE, 4, SHARDS).numpy()
    halves = stf.lookup(ids, TABLE, 4, SHARDS, wire_float16=True).numpy()
    layer = stf.Embedding(TABLE, 4, shards=SHARDS, create_table=False,
                          wire_float16=True)
    with tf.GradientTape() as tape:
        rows = layer(tf.constant([[1]], tf.int64), training=True)
        loss = tf.reduce_sum(rows * tf.constant([0.1, 0.2, 0.3, 0.4]))
    tape.gradient(loss, layer.trainable_variables)  # pushes in float16
    report(exact=exact.tolist(), halves=halves.tolist())
"""


def test_float16_on_the_wire_rounds_rows_and_gradients_to_halves(
        shards, workdir):
    table = "fresh_wire_fp16"
    stf.create_table(table, 4, shards, optimizer="sgd", learning_rate=1.0,
                     initializer="uniform",
                     initializer_args={"min": -1, "max": 1}, seed=5)
    got = run_case(WIRE_FLOAT16, shards, table, workdir)
    exact = np.array(got["exact"], np.float32)
    halves = np.array(got["halves"], np.float32)
    np.testing.assert_array_equal(halves,
                                  exact.astype(np.float16).astype(np.float32))
    assert not np.array_equal(halves, exact)  # rounded on the way
    # The shard applied the half-float gradient to its float32 row.
    gradient = np.array([0.1, 0.2, 0.3, 0.4], np.float16).astype(np.float32)
    np.testing.assert_allclose(pull(shards, table, [1], 4)[0],
                               exact[0] - gradient, atol=1e-6)


def test_keras_save_and_load_model_in_a_new_process(shards, workdir):
    save = """
        ids, labels = ids_and_labels()
        model = keras_model()
        model.fit(ids, labels, epochs=1, batch_size=64, verbose=0)
        model.save(os.path.join(WORK, "fresh_keras.keras"))
        report(predicted=model.predict(ids[:8], verbose=0).ravel().tolist())
    """
    load = """
        ids, _ = ids_and_labels()
        model = keras.models.load_model(os.path.join(WORK, "fresh_keras.keras"))
        report(predicted=model.predict(ids[:8], verbose=0).ravel().tolist())
    """
    saved = run_case(save, shards, "fresh_keras", workdir)
    loaded = run_case(load, shards, "fresh_keras", workdir)
    np.testing.assert_allclose(loaded["predicted"], saved["predicted"],
                               atol=1e-6)


def test_saved_model_save_and_load_in_a_new_process(shards, workdir):
    save = """
        ids, labels = ids_and_labels()
        model = keras_model()
        model.fit(ids, labels, epochs=1, batch_size=64, verbose=0)
        model.export(os.path.join(WORK, "fresh_exported"))
        module = tf.Module()
        module.dense = model
        module.predict = tf.function(
            lambda i: model(i),
            input_signature=[tf.TensorSpec([None, 2], tf.int64)])
        tf.saved_model.save(module, os.path.join(WORK, "fresh_module"))
        report(predicted=model.predict(ids[:8], verbose=0).ravel().tolist())
    """
    load = """
        ids, _ = ids_and_labels()
        stf.load_ops()  # the one custom-op dependency of the SavedModels
        exported = tf.saved_model.load(os.path.join(WORK, "fresh_exported"))
        module = tf.saved_model.load(os.path.join(WORK, "fresh_module"))
        report(served=exported.serve(tf.constant(ids[:8])).numpy().ravel().tolist(),
               module=module.predict(tf.constant(ids[:8])).numpy().ravel().tolist())
    """
    saved = run_case(save, shards, "fresh_saved", workdir)
    loaded = run_case(load, shards, "fresh_saved", workdir)
    np.testing.assert_allclose(loaded["served"], saved["predicted"],
                               atol=1e-6)
    np.testing.assert_allclose(loaded["module"], saved["predicted"],
                               atol=1e-6)


def test_attach_to_an_existing_table_then_predict(shards, workdir):
    table = "fresh_attach"
    create_sgd_table(shards, table)
    stf.push(np.array([4], np.int64), tf.ones([1, 4]), table, 4, shards)
    body = """
        model = keras_model(create_table=False)
        ids = np.array([[4, 4], [0, 0]], np.int64)
        report(predicted=model.predict(ids, verbose=0).ravel().tolist())
    """
    got = run_case(body, shards, table, workdir)["predicted"]
    # Dense kernel of ones, bias 0: sigmoid of the sum of the two rows.
    np.testing.assert_allclose(got, [1 / (1 + np.exp(8.0)), 0.5], atol=1e-6)


def test_several_tables_in_one_model_and_two_models(shards, workdir):
    body = """
        ids, labels = ids_and_labels()
        user = keras.Input(shape=(2,), dtype="int64")
        item = keras.Input(shape=(2,), dtype="int64")
        a = stf.Embedding(TABLE + "_user", 4, shards=SHARDS)(user)
        b = stf.Embedding(TABLE + "_item", 8, shards=SHARDS)(item)
        x = keras.layers.Concatenate()([keras.layers.Flatten()(a),
                                        keras.layers.Flatten()(b)])
        two_tables = keras.Model([user, item],
                                 keras.layers.Dense(1, activation="sigmoid")(x))
        two_tables.compile(optimizer="adam", loss="binary_crossentropy")
        first = two_tables.fit([ids, ids + 1], labels, epochs=3,
                               batch_size=64, verbose=0).history["loss"]
        other = keras_model(TABLE + "_other")
        second = other.fit(ids, labels, epochs=3, batch_size=64,
                           verbose=0).history["loss"]
        moved = [float(np.abs(stf.lookup(ids[:8], TABLE + s, d,
                                         SHARDS).numpy()).sum())
                 for s, d in (("_user", 4), ("_item", 8), ("_other", 4))]
        report(first=first, second=second, moved=moved)
    """
    got = run_case(body, shards, "fresh_multi", workdir)
    assert got["first"][-1] < got["first"][0], got
    assert got["second"][-1] < got["second"][0], got
    assert all(m > 0 for m in got["moved"]), got


def test_mirrored_strategy_on_two_cpu_devices(shards, workdir):
    body = """
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        assert strategy.num_replicas_in_sync == 2
        ids, labels = ids_and_labels()
        with strategy.scope():
            model = keras_model()
        losses = model.fit(ids, labels, epochs=4, batch_size=64,
                           verbose=0).history["loss"]
        report(losses=losses, replicas=strategy.num_replicas_in_sync)
    """
    got = run_case(body, shards, "fresh_mirrored", workdir)
    assert got["replicas"] == 2
    assert got["losses"][-1] < got["losses"][0], got


# --- A shard restarted, or gone for good, during model.fit -----------------

FIT_THROUGH_A_RESTART = """
    import time
    ids, labels = ids_and_labels(n=2048)
    model = keras_model(retry_deadline=60.0, rpc_timeout=5.0)
    start_file = os.path.join(WORK, TABLE + ".started")

    class Announce(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2 and not os.path.exists(start_file):
                open(start_file, "w").close()

    begin = time.monotonic()
    history = model.fit(ids, labels, epochs=3, batch_size=32, verbose=0,
                        callbacks=[Announce()])
    seconds = time.monotonic() - begin
    rows = stf.lookup(np.arange(50, dtype=np.int64), TABLE, 4, SHARDS)
    report(losses=history.history["loss"], seconds=seconds,
           rows=rows.numpy().tolist())
"""


def wait_for_text(path, text, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, f"the trainer exited {proc.returncode}"
        assert time.monotonic() < deadline, f"no {text!r} in {path}"
        time.sleep(0.05)


def wait_for_file(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the trainer exited {proc.returncode}"
        assert time.monotonic() < deadline, f"no {path} after {timeout}s"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_fit_rides_through_a_shard_restart(tmp_path, how):
    cluster = Cluster(f"strata-py-tf-restart-{how}-")
    try:
        server = binary("strata-server")
        argv = [[server, "--host=127.0.0.1", f"--shard_index={i}",
                 "--num_shards=2", "--durability=sync",
                 f"--data_dir={cluster.workdir / f'shard{i}'}",
                 "--log_level=warning"] for i in range(2)]
        first = [cluster.start(f"shard{i}", argv[i] + ["--port=0"])
                 for i in range(2)]
        addresses = [shard.wait_ready() for shard in first]
        victim_port = addresses[1].rsplit(":", 1)[1]
        table = f"fresh_restart_{how}"
        trainer, log_path = start_case(FIT_THROUGH_A_RESTART,
                                       ",".join(addresses), table, tmp_path)
        try:
            wait_for_file(tmp_path / f"{table}.started", trainer)
            first[1].proc.send_signal(
                signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
            first[1].proc.wait(30)
            # Restart once the trainer's calls are retrying.
            wait_for_text(log_path, "waiting for a shard", trainer)
            again = cluster.start("shard1-again",
                                  argv[1] + [f"--port={victim_port}"])
            again.wait_ready()
        finally:
            result, text = finish_case(trainer, log_path)
        assert len(result["losses"]) == 3
        assert result["losses"][-1] < result["losses"][0], result
        # One WARNING for the outage (per client, not per retried call).
        waits = text.count("waiting for a shard")
        assert 1 <= waits <= 2, text[-6000:]
    finally:
        cluster.stop()


def primary_of(group, exclude=None, timeout=60):
    """Index of the replica `stratactl status` names as the group's primary
    (waited for; not `exclude`)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = subprocess.run(
            [binary("stratactl"), f"--shards={group}", "--json", "status"],
            capture_output=True, text=True, timeout=30, check=False)
        try:
            replication = json.loads(answer.stdout)["shards"][0]["replication"]
            if replication["answered_by_primary"]:
                primary = int(replication["primary"].lstrip("r"))
                if primary != exclude:
                    return primary
        except (ValueError, KeyError, IndexError):
            pass
        assert time.monotonic() < deadline, (
            f"no primary of {group} after {timeout}s: {answer.stdout} "
            f"{answer.stderr}")
        time.sleep(0.1)


def test_fit_rides_through_a_primary_failover(tmp_path):
    """A shard of three replicas (replicated mode, a real etcd): its primary
    killed with kill -9 during model.fit costs the job nothing. The op finds
    the new primary through the replicas' redirects and retries; every
    epoch's loss is there and the model still learns."""
    cluster = Cluster("strata-py-tf-failover-")
    try:
        etcd = cluster.start_etcd()
        replicas = [cluster.start_shard(
            f"r{r}", f"--etcd_endpoints={etcd}", f"--replica_id=r{r}",
            "--replicas=3", "--replication=replicated", "--durability=group",
            "--lease_ttl_ms=1000", "--cluster_name=tf-failover")
            for r in range(3)]
        group = "|".join(replica.wait_ready() for replica in replicas)
        first = primary_of(group)
        table = "fresh_failover"
        trainer, log_path = start_case(FIT_THROUGH_A_RESTART, group, table,
                                       tmp_path)
        try:
            wait_for_file(tmp_path / f"{table}.started", trainer)
            replicas[first].proc.kill()
            replicas[first].proc.wait(30)
            second = primary_of(group, exclude=first)
        finally:
            result, text = finish_case(trainer, log_path)
        assert second != first
        # The job went through the failover (its calls waited for it).
        assert "waiting for a shard" in text, text[-6000:]
        assert len(result["losses"]) == 3
        assert result["losses"][-1] < result["losses"][0], result
        # The new primary holds the rows the job read at its end.
        np.testing.assert_array_equal(
            pull(group, table, list(range(50)), 4), np.asarray(result["rows"],
                                                             np.float32))
    finally:
        cluster.stop()


GONE = """
    import time
    ids, labels = ids_and_labels(n=4096)
    short = dict(retry_deadline=2.0, rpc_timeout=1.0)
    killed = os.path.join(WORK, "killed")

    def wait_for_the_kill():
        open(os.path.join(WORK, "kill-now"), "w").close()
        while not os.path.exists(killed):
            time.sleep(0.02)

    errors = {}
    # Eager: the op's own UnavailableError.
    stf.create_table(TABLE, 4, SHARDS, **short)
    stf.lookup(ids[:4], TABLE, 4, SHARDS, **short)
    wait_for_the_kill()
    begin = time.monotonic()
    try:
        stf.lookup(ids[:4], TABLE, 4, SHARDS, **short)
    except tf.errors.UnavailableError as e:
        errors["eager"] = [type(e).__name__, str(e), time.monotonic() - begin]
    # model.fit: TensorFlow turns UNAVAILABLE from any op but its own
    # Send/Recv inside a graph function into INTERNAL, keeping the message.
    model = keras_model(create_table=False, **short)
    try:
        model.fit(ids, labels, epochs=1, batch_size=16, verbose=0)
    except (tf.errors.UnavailableError, tf.errors.InternalError) as e:
        errors["fit"] = [type(e).__name__, str(e), 0.0]
    report(**errors)
"""


def test_shard_gone_past_the_retry_deadline_is_an_error_naming_it(tmp_path):
    cluster = Cluster("strata-py-tf-gone-")
    try:
        shard = cluster.start_shard("gone")
        address = shard.wait_ready()
        trainer, log_path = start_case(GONE, address, "fresh_gone", tmp_path)
        try:
            wait_for_file(tmp_path / "kill-now", trainer)
            shard.proc.kill()
            shard.proc.wait(30)
            (tmp_path / "killed").write_text("")
        finally:
            got, _ = finish_case(trainer, log_path)
        kind, message, seconds = got["eager"]
        assert kind == "UnavailableError" and address in message, got
        assert 1.5 < seconds < 30, got
        kind, message, _ = got["fit"]
        assert address in message and "gave up after retrying" in message, got
        assert kind == "UnavailableError" or (
            "originally returned UnavailableError" in message), got
    finally:
        cluster.stop()


# --- Multi-hot and sequence features ---------------------------------------

MULTI_HOT = """
    kind = os.environ["STRATA_TEST_KIND"]
    vocab, dim = 12, 4
    rows_ids = [[1, 3, 3], [], [5, 1], [7, 3, 9, 1]]  # one empty example
    rows_weights = [[1.0, 0.5, 2.0], [], [3.0, 1.0], [0.25, 1.0, 1.5, 0.5]]
    ragged_ids = tf.ragged.constant(rows_ids, dtype=tf.int64)
    ragged_weights = tf.ragged.constant(rows_weights, dtype=tf.float32)
    upstream = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 7)
    worst = 0.0
    for combiner in ("sum", "mean", "sqrtn"):
        for weighted in (False, True):
            table = f"{TABLE}_{combiner}_{int(weighted)}"
            stf.create_table(table, dim, SHARDS, optimizer="sgd",
                             learning_rate=1.0, initializer="uniform",
                             initializer_args={"min": -1, "max": 1}, seed=11)
            params = stf.lookup(np.arange(vocab), table, dim, SHARDS).numpy()
            reference = keras.layers.Embedding(vocab, dim)
            reference.build((None,))
            reference.set_weights([params])
            sparse_ids = ragged_ids.to_sparse()
            sparse_weights = ragged_weights.to_sparse() if weighted else None
            padding = {}
            if kind == "ragged":
                ids, weights = ragged_ids, ragged_weights if weighted else None
            elif kind == "padded":  # trailing -1s, weights padded with 9s
                padding = {"padding_id": -1}
                ids = ragged_ids.to_tensor(default_value=-1)
                weights = ragged_weights.to_tensor(default_value=9.0) \
                    if weighted else None
            else:
                ids, weights = sparse_ids, sparse_weights
            layer = stf.Embedding(table, dim, shards=SHARDS, combiner=combiner,
                                  create_table=False, **padding)
            with tf.GradientTape() as tape:
                got = layer(ids, weights)
                loss = tf.reduce_sum(got * upstream)
            tape.gradient(loss, layer.trainable_variables)  # pushes
            with tf.GradientTape() as tape:
                # The layer's tf.Variable (Keras 3 wraps it).
                table_variable = reference.embeddings.value
                want = tf.nn.embedding_lookup_sparse(
                    table_variable, sparse_ids, sparse_weights,
                    combiner=combiner)
                ref_loss = tf.reduce_sum(want * upstream)
            grad = tf.convert_to_tensor(
                tape.gradient(ref_loss, table_variable))
            assert got.shape == (4, dim), got.shape
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)
            after = stf.lookup(np.arange(vocab), table, dim, SHARDS).numpy()
            np.testing.assert_allclose(after, params - grad.numpy(), atol=1e-6)
            assert np.abs(grad.numpy()[3]).sum() > 0  # id 3 repeats
            worst = max(worst, float(np.abs(got.numpy() - want.numpy()).max()),
                        float(np.abs(after - (params - grad.numpy())).max()))
    report(worst=worst)
"""


@pytest.mark.parametrize("kind", ["ragged", "sparse", "padded"])
def test_multi_hot_lookups_equal_keras_with_the_same_combiner(shards, workdir,
                                                              kind):
    got = run_case(MULTI_HOT, shards, f"fresh_multi_hot_{kind}", workdir,
                   env={"STRATA_TEST_KIND": kind})
    assert got["worst"] <= 1e-6, got


def test_multi_hot_layer_trains_in_model_fit(shards, workdir):
    body = """
        ids = keras.Input(shape=(None,), dtype="int64", ragged=True)
        pooled = stf.Embedding(TABLE, 4, shards=SHARDS, combiner="mean")(ids)
        out = keras.layers.Dense(1, activation="sigmoid")(pooled)
        model = keras.Model(ids, out)
        model.compile(optimizer="adam", loss="binary_crossentropy")
        rng = np.random.default_rng(0)
        lists = [list(rng.integers(0, 40, size=rng.integers(1, 6)))
                 for _ in range(512)]
        labels = np.array([[float(l[0] % 2 == 0)] for l in lists], np.float32)
        data = tf.data.Dataset.from_tensor_slices(
            (tf.ragged.constant(lists, dtype=tf.int64), labels)).batch(32)
        losses = model.fit(data, epochs=8, verbose=0).history["loss"]
        report(losses=losses)
    """
    got = run_case(body, shards, "fresh_multi_hot_fit", workdir)
    assert got["losses"][-1] < got["losses"][0] - 0.01, got
    assert all(b < a for a, b in zip(got["losses"], got["losses"][1:])), got


# --- A model that serves from strata-serving alone --------------------------

TRAIN_AND_EXPORT = """
    import time
    serving = os.environ["STRATA_TEST_SERVING"]
    ids, labels = ids_and_labels()
    model = keras_model()
    model.fit(ids, labels, epochs=3, batch_size=32, verbose=0)
    # The serving PS follows the shard's change stream: wait until it has
    # every row the model reads (ids 0..49) as the shard holds it.
    keys = np.arange(50, dtype=np.int64)
    trained = stf.lookup(keys, TABLE, 4, SHARDS).numpy()
    deadline = time.monotonic() + 60
    while not np.array_equal(stf.serving_lookup(keys, TABLE, 4, serving).numpy(),
                             trained):
        assert time.monotonic() < deadline, "serving PS never caught up"
        time.sleep(0.1)
    stf.export_for_serving(model, os.path.join(WORK, "served"), serving)
    # The model trains on as before (its layers still use the shards).
    assert model.layers[1].serving is None
    report(predicted=model.predict(ids[:16], verbose=0).ravel().tolist())
"""

SERVE = """
    ids, _ = ids_and_labels()
    stf.load_ops()  # the SavedModel's one custom-op dependency
    loaded = tf.saved_model.load(os.path.join(WORK, "served"))
    signature = loaded.signatures["serving_default"]
    by_signature = list(signature(tf.constant(ids[:16])).values())[0]
    report(served=loaded.serve(tf.constant(ids[:16])).numpy().ravel().tolist(),
           by_signature=by_signature.numpy().ravel().tolist())
"""


def test_exported_model_serves_from_strata_serving_alone(tmp_path):
    cluster = Cluster("strata-py-tf-serve-")
    try:
        shard = cluster.start_shard("shard")
        address = shard.wait_ready()
        serving = cluster.start("serving", [
            binary("strata-serving"), "--port=0", "--host=127.0.0.1",
            f"--shards={address}", f"--data_dir={cluster.workdir / 'serving'}",
            "--log_level=warning"]).wait_ready()
        env = {"STRATA_TEST_SERVING": serving}
        trained = run_case(TRAIN_AND_EXPORT, address, "fresh_served", tmp_path,
                           env=env)
        shard.stop()  # the training cluster is gone
        assert shard.proc.returncode is not None
        served = run_case(SERVE, "127.0.0.1:1", "fresh_served", tmp_path,
                          env=env)
        np.testing.assert_allclose(served["served"], trained["predicted"],
                                   atol=1e-6)
        np.testing.assert_allclose(served["by_signature"],
                                   trained["predicted"], atol=1e-6)
        # Not all 0.5: the served rows are the trained ones, not zeros.
        assert np.ptp(served["served"]) > 1e-3, served
    finally:
        cluster.stop()


def test_op_library_of_another_tensorflow_fails_at_load_naming_both(
        tmp_path):
    built = stf.library_path()
    for name in (built.name, "libstrata_tf_client.so"):
        shutil.copy(built.parent / name, tmp_path / name)
    (tmp_path / (built.name + ".tf_version")).write_text("2.0.0\n")
    body = """
        try:
            stf.load_ops()
        except ImportError as e:
            report(error=str(e), tf=tf.__version__)
        else:
            report(error=None)
    """
    got = run_case(body, "127.0.0.1:1", "fresh_version", tmp_path, env={
        "STRATA_TF_OPS_LIBRARY": str(tmp_path / built.name)})
    assert got["error"] and "2.0.0" in got["error"], got
    assert f"TensorFlow {got['tf']}" in got["error"], got


def test_checkpoint_callback_saves_rows_and_dense_weights_together(
        shards, workdir):
    body = """
        ids, labels = ids_and_labels()
        model = keras_model()
        directory = os.path.join(WORK, "ck")
        saved = stf.CheckpointCallback(SHARDS, directory)
        at_checkpoints = {}

        class Record(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                at_checkpoints[saved.saved[-1]] = model.predict(
                    ids[:16], verbose=0)

        model.fit(ids, labels, epochs=3, batch_size=32, verbose=0,
                  callbacks=[saved, Record()])
        assert saved.saved == ["step-8", "step-16", "step-24"], saved.saved
        first = at_checkpoints["step-8"]
        assert not np.allclose(model.predict(ids[:16], verbose=0), first)
        step = stf.restore_checkpoint(model, SHARDS, directory, "step-8")
        report(step=step, restored=model.predict(ids[:16], verbose=0).tolist(),
               first=first.tolist())
    """
    got = run_case(body, shards, "fresh_checkpoint", workdir)
    assert got["step"] == 8
    np.testing.assert_allclose(got["restored"], got["first"], atol=1e-6)


def test_readme_example_runs_from_another_directory_without_env_vars(
        shards, serving_address, tmp_path):
    """examples/keras_quickstart.py as a user runs it: from elsewhere, with
    the package as pip installed it (op library included), no STRATA_*."""
    example = REPO / "examples" / "keras_quickstart.py"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STRATA_") and k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run(
        [sys.executable, str(example), f"--shards={shards}",
         f"--serving={serving_address}", f"--out={tmp_path / 'out'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=CASE_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["served_equals_trained"], got
    assert got["losses"][-1] < got["losses"][0], got
    assert len(got["checkpoints"]) == 4, got


def test_one_pip_command_installs_tf_support_for_the_readme_example(
        shards, serving_address, tmp_path):
    """`pip install ./python tensorflow-cpu` in ONE command into a fresh
    virtual environment: pip builds strata before it installs TensorFlow,
    so the op library comes from the checkout at the first import. Then the
    README's example runs from another directory with no STRATA_* set."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("STRATA_") and k not in
             ("PYTHONPATH", "VIRTUAL_ENV")}
    install_env = dict(clean)
    build_dir = pathlib.Path(binary("strata-server")).parent.parent
    if build_dir != REPO / "build":
        install_env["STRATA_BUILD_DIR"] = str(build_dir)
    # The versions python/run_tests.sh installs, so pip's cache has them.
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", "./python", "tensorflow-cpu==2.21.0",
         "keras==3.15.1"],
        cwd=REPO, env=install_env, capture_output=True, text=True,
        timeout=900, stdin=subprocess.DEVNULL)
    assert installed.returncode == 0, (installed.stdout +
                                       installed.stderr)[-6000:]
    package = pathlib.Path(subprocess.run(
        [str(python), "-c", "import strata, pathlib; "
         "print(pathlib.Path(strata.__file__).parent / 'tf')"],
        cwd=tmp_path, env=clean, capture_output=True, text=True, check=True,
        timeout=120).stdout.strip())
    # No op library yet: TensorFlow came after strata's build.
    assert not (package / "libstrata_tf_ops.so").exists()
    assert (package / "_checkout.json").is_file()

    env = dict(clean, TF_CPP_MIN_LOG_LEVEL="2")
    example = REPO / "examples" / "keras_quickstart.py"
    result = subprocess.run(
        [str(python), str(example), f"--shards={shards}",
         f"--serving={serving_address}", f"--out={tmp_path / 'out'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=CASE_TIMEOUT * 2, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["served_equals_trained"], got
    assert got["losses"][-1] < got["losses"][0], got
    # The library now lives in the package, built for this TensorFlow.
    assert (package / "libstrata_tf_ops.so").is_file()
    assert (package / "libstrata_tf_client.so").is_file()
    assert (package / "libstrata_tf_ops.so.tf_version").read_text().strip() \
        == "2.21.0"
