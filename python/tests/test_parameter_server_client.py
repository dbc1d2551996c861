"""ParameterServerClient against two live strata-server shards, checked
against the C++ client (stratactl) so that routing is the same bit for bit."""

import json
import threading
import time

import numpy as np
import pytest

import strata
from strata_cluster import Cluster, binary, free_port

MAX = 2**64 - 1
KEYS = [0, 1, 2, 3, 42, 4096, 2**32 + 7, 2**63, MAX - 1, MAX]


@pytest.fixture(scope="module")
def ps(shard_addresses):
    with strata.ParameterServerClient(shard_addresses, timeout=10) as client:
        yield client


def pull_with_stratactl(stratactl, table, keys):
    doc = json.loads(stratactl("--json", "pull", table,
                               ",".join(str(k) for k in keys)))
    return np.array([row["values"] for row in doc["rows"]], np.float32)


def test_python_pushes_land_where_the_cpp_client_reads(ps, stratactl):
    assert ps.create_table("py_route", dim=3, optimizer="sgd",
                           learning_rate=1.0, initializer="zeros")
    grads = np.arange(len(KEYS) * 3, dtype=np.float32).reshape(-1, 3) / 4
    ps.push("py_route", KEYS, grads)
    np.testing.assert_array_equal(pull_with_stratactl(stratactl, "py_route", KEYS),
                                  -grads)
    np.testing.assert_array_equal(ps.pull("py_route", KEYS), -grads)


def test_cpp_pushes_are_read_back_by_python(ps, stratactl, tmp_path):
    stratactl("create-table", "cc_route", "--dim=2", "--optimizer=sgd",
              "--learning_rate=1")
    lines = [f"{k} {i / 2} {-i}" for i, k in enumerate(KEYS)]
    (tmp_path / "grads.txt").write_text("\n".join(lines) + "\n")
    stratactl("push", "cc_route", f"--file={tmp_path / 'grads.txt'}")
    expected = np.array([[-i / 2, i] for i in range(len(KEYS))], np.float32)
    np.testing.assert_array_equal(ps.pull("cc_route", KEYS), expected)


def test_pull_keeps_order_and_duplicates_and_push_sums_them(ps):
    ps.create_table("py_dups", dim=2, optimizer="sgd", learning_rate=1.0,
                    initializer="zeros")
    ps.push("py_dups", [5, 5, 9], [[1, 1], [2, 2], [4, 8]])
    rows = ps.pull("py_dups", np.array([9, 5, 9, 7], np.uint64))
    np.testing.assert_array_equal(rows, [[-4, -8], [-3, -3], [-4, -8], [0, 0]])
    assert rows.dtype == np.float32 and rows.shape == (4, 2)


def test_create_table_is_idempotent_and_unknown_table_is_not_found(ps):
    ps.create_table("py_idem", dim=4)
    assert not ps.create_table("py_idem", dim=4)
    with pytest.raises(strata.NotFoundError, match="py_nope"):
        ps.pull("py_nope", [1])


def test_wrong_dimension_is_invalid_argument(ps):
    ps.create_table("py_dim", dim=4, optimizer="sgd", learning_rate=1.0)
    with pytest.raises(strata.InvalidArgumentError):
        ps.push("py_dim", [1], [1.0, 2.0])


def test_calls_retry_unavailable_until_a_late_shard_comes_up():
    port = free_port()
    cluster = Cluster("strata-py-late-")
    server = binary("strata-server")
    started = []

    def start():
        started.append(cluster.start("late", [
            server, f"--port={port}", "--host=127.0.0.1",
            f"--data_dir={cluster.workdir / 'late'}", "--log_level=warning"]))

    timer = threading.Timer(1.0, start)
    try:
        with strata.ParameterServerClient(f"127.0.0.1:{port}",
                                          timeout=20.0) as ps:
            begin = time.monotonic()
            timer.start()
            assert ps.create_table("late", dim=2)
            assert time.monotonic() - begin >= 0.9
            assert started and started[0].proc.poll() is None
    finally:
        timer.cancel()
        timer.join()
        cluster.stop()


@pytest.mark.parametrize("method", ["CreateTable", "ListTables", "Pull",
                                    "Push", "Checkpoint", "Restore", "Stats"])
def test_a_request_that_does_not_parse_is_invalid_argument_naming_it(
        shard_addresses, method):
    import grpc
    with grpc.insecure_channel(shard_addresses[0]) as channel:
        call = channel.unary_unary(f"/strata.v1.ParameterServer/{method}")
        with pytest.raises(grpc.RpcError) as raised:
            call(b"\xff\xff\xff", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert method in raised.value.details()
    assert "is not a strata.v1." in raised.value.details()


def test_admin_calls_cover_tables_stats_health_checkpoint_and_restore(
        shard_addresses):
    with strata.ParameterServerClient(shard_addresses) as ps:
        assert ps.create_table(
            "py_admin", dim=2, optimizer="sgd", learning_rate=1.0,
            initializer="zeros", admission={"min_count": 2},
            eviction={"after_steps": 1000}, memory_budget_bytes=1 << 20,
            timeout=5.0)
        keys = list(range(1, 41))
        ps.push("py_admin", keys, np.ones((40, 2), np.float32))
        ps.push("py_admin", keys, np.ones((40, 2), np.float32))  # admitted
        table = [t for t in ps.list_tables() if t["name"] == "py_admin"][0]
        assert table["dim"] == 2 and table["num_rows"] == 40, table
        assert table["config"].admit_min_count == 2
        assert table["config"].evict_after_steps == 1000
        assert table["config"].memory_budget_bytes == 1 << 20
        stats = ps.stats(timeout=5.0)
        assert [s.shard_index for s in stats] == [0, 1]
        assert sum(s.keys_pushed for s in stats) >= 80
        assert ps.health() == {a: "SERVING" for a in shard_addresses}
        saved = ps.checkpoint("py-admin-ck", global_step=7)
        assert saved["checkpoint_id"] == "py-admin-ck"
        assert saved["global_step"] == 7 and saved["num_rows"] >= 40
        before = ps.pull("py_admin", keys)
        ps.push("py_admin", keys, np.ones((40, 2), np.float32))
        assert not np.array_equal(ps.pull("py_admin", keys), before)
        restored = ps.restore("py-admin-ck", timeout=30.0)
        assert restored["global_step"] == 7
        np.testing.assert_array_equal(ps.pull("py_admin", keys), before)
        with pytest.raises(ValueError, match="min_counts"):
            ps.create_table("py_bad", dim=2, admission={"min_counts": 2})


def test_defaults_agree_with_the_keras_layer():
    import inspect
    import strata.training as training
    signature = inspect.signature(
        strata.ParameterServerClient.create_table).parameters
    assert signature["optimizer"].default == training.DEFAULT_OPTIMIZER
    assert signature["learning_rate"].default == 0.05
    assert signature["initializer"].default == "truncated_normal"
    assert training.default_optimizer_args("adagrad") == {
        "initial_accumulator": 0.1}
