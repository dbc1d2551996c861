"""ServingClient against a live cluster: two strata-server shards and a
strata-serving that follows them (fixtures in conftest.py).

Rows are trained through the training shards (ParameterServerClient), then
the tests wait until serving reports every shard caught up (applied ==
latest) and serves the trained values, and compare bit for bit.
"""

import time

import grpc
import numpy as np
import pytest

import strata
from strata._proto import strata_pb2, strata_pb2_grpc
from strata_cluster import free_port

MAX = 2**64 - 1
CATCH_UP_TIMEOUT = 30.0
# (name, dim, create_table arguments); every table is trained except "wide".
TABLES = {
    "srv_users": (4, dict(optimizer="sgd", learning_rate=1.0)),
    "srv_items": (3, dict(optimizer="adagrad", learning_rate=0.05,
                          initializer="uniform", seed=7,
                          initializer_args={"min": -0.1, "max": 0.1})),
    "srv_wide": (64, dict(optimizer="sgd")),
}


class Trained:
    """Keys pushed to each table and the values the training shards hold."""

    def __init__(self, keys, expected):
        self.keys = keys
        self.expected = expected


def caught_up(status, num_shards):
    shards = status["shards"]
    return (len(shards) == num_shards and
            all(s["connected"] and s["applied"] == s["latest"] for s in shards))


def serves(client, name, keys, rows):
    """Whether the serving PS answers `rows` for `keys` of `name`; a table
    it does not have yet is not an error here. (Its status can say it is
    caught up with a shard's latest sequence before the next heartbeat tells
    it of newer ones, for instance just after the shard restored a
    checkpoint.)"""
    try:
        return np.array_equal(client.lookup(name, keys), rows)
    except strata.NotFoundError:
        return False


@pytest.fixture(scope="module")
def client(serving_address):
    with strata.ServingClient(serving_address, timeout=5.0) as c:
        yield c


@pytest.fixture(scope="module")
def trained(shard_addresses, client):
    rng = np.random.default_rng(1234)
    keys = np.concatenate([
        np.array([0, 1, 7, 4096, 2**32, 2**63, MAX - 1, MAX], np.uint64),
        rng.integers(0, MAX, size=300, dtype=np.uint64, endpoint=True)])
    keys = np.unique(keys)
    expected = {}
    with strata.ParameterServerClient(shard_addresses) as ps:
        for name, (dim, args) in TABLES.items():
            ps.create_table(name, dim=dim, **args)
        for step in range(3):  # several updates per shard
            for name in ("srv_users", "srv_items"):
                dim = TABLES[name][0]
                grads = rng.standard_normal((keys.size, dim)).astype(np.float32)
                ps.push(name, keys, grads)
        for name in ("srv_users", "srv_items"):
            expected[name] = ps.pull(name, keys)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    while True:
        status = client.status()
        if caught_up(status, len(shard_addresses)) and all(
                serves(client, name, keys, rows)
                for name, rows in expected.items()):
            return Trained(keys, expected)
        if time.monotonic() > deadline:
            pytest.fail(f"serving did not catch up with training within "
                        f"{CATCH_UP_TIMEOUT}s; last status: {status}")
        time.sleep(0.1)


def test_lookups_equal_the_training_values(client, trained):
    for name, rows in trained.expected.items():
        np.testing.assert_array_equal(client.lookup(name, trained.keys), rows)


def test_fp16_lookups_are_the_values_rounded_to_halves(serving_address,
                                                      trained):
    with strata.ServingClient(serving_address, timeout=5.0,
                              fp16=True) as half_client:
        for name, rows in trained.expected.items():
            halves = half_client.lookup(name, trained.keys)
            assert halves.dtype == np.float32 and halves.shape == rows.shape
            np.testing.assert_array_equal(
                halves, rows.astype(np.float16).astype(np.float32))
            # Trained values are seldom halves: the answer was rounded.
            assert (halves != rows).mean() > 0.5


def test_status_shows_every_shard_followed_and_caught_up(
        client, trained, shard_addresses):
    status = client.status()
    assert status["mode"] == "follow"
    shards = sorted(status["shards"], key=lambda s: s["shard_index"])
    assert [s["shard_index"] for s in shards] == [0, 1]
    assert [s["address"] for s in shards] == shard_addresses
    for s in shards:
        assert s["connected"] is True
        assert s["applied"] == s["latest"] > 0 and s["lag"] == 0
        assert s["incarnation"] > 0 and s["lag_seconds"] >= 0
        assert isinstance(s["last_error"], str)
    tables = {t["name"]: t for t in status["tables"]}
    for name, (dim, _) in TABLES.items():
        assert tables[name]["dim"] == dim
    assert tables["srv_users"]["num_rows"] >= trained.keys.size


def test_output_shape_dtype_and_order_follow_the_keys(client, trained):
    order = np.random.default_rng(5).permutation(trained.keys.size)[:50]
    keys = trained.keys[order]
    rows = client.lookup("srv_users", keys)
    assert rows.shape == (50, 4) and rows.dtype == np.float32
    assert rows.flags.c_contiguous
    np.testing.assert_array_equal(rows, trained.expected["srv_users"][order])
    assert (keys < 2**63).any()
    for same_keys in (keys.tolist(), tuple(keys.tolist()), keys.astype(object),
                      keys[keys < 2**63].astype(np.int64)):
        expected = client.lookup("srv_users", np.array(same_keys, np.uint64))
        np.testing.assert_array_equal(client.lookup("srv_users", same_keys),
                                      expected)


def test_duplicate_keys_get_their_row_each_time(client, trained):
    a, b = int(trained.keys[3]), int(trained.keys[9])
    rows = client.lookup("srv_items", [a, b, a, a, b])
    row_a, row_b = client.lookup("srv_items", [a, b])
    np.testing.assert_array_equal(rows, [row_a, row_b, row_a, row_a, row_b])


def test_largest_key_and_untrained_keys(client, trained):
    np.testing.assert_array_equal(
        client.lookup("srv_users", [MAX]),
        trained.expected["srv_users"][trained.keys == MAX])
    untrained = [k for k in (2, 3, 5) if k not in set(trained.keys.tolist())]
    assert not client.lookup("srv_users", untrained).any()  # zeros initializer


def test_large_lookup_exceeds_grpc_default_message_size(client, trained):
    keys = np.arange(20000, dtype=np.uint64)  # 20000 * 64 floats = 5.1 MB
    rows = client.lookup("srv_wide", keys)
    assert rows.shape == (20000, 64) and not rows.any()


def test_unknown_table_raises_not_found_naming_it(client, trained):
    with pytest.raises(strata.NotFoundError, match="no_such_table") as info:
        client.lookup("no_such_table", [1, 2])
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert "no_such_table" in info.value.details


def test_empty_keys_raise_invalid_argument_like_the_server(
        client, trained, serving_address):
    # The client refuses before calling (InvalidArgumentError is also a
    # ValueError); the server would answer INVALID_ARGUMENT too.
    for empty in ([], np.array([], np.uint64)):
        with pytest.raises(strata.InvalidArgumentError, match="srv_users"):
            client.lookup("srv_users", empty)
    with grpc.insecure_channel(serving_address) as channel:
        stub = strata_pb2_grpc.ServingServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Lookup(strata_pb2.LookupRequest(table="srv_users"), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("keys", [[-1], [1, -5], np.array([-3]), [1.5],
                                  np.array([1.0]), [2**64], ["3"], [[1, 2]]])
def test_bad_ids_raise_value_error(client, keys):
    with pytest.raises(ValueError):
        client.lookup("srv_users", keys)


# Exclusive: each lookup past a dead endpoint must take under 2 s.
@pytest.mark.exclusive
def test_round_robin_over_a_list_of_endpoints(serving_address, trained):
    keys = trained.keys[:20]
    expected = trained.expected["srv_users"][:20]
    with strata.ServingClient([serving_address, serving_address]) as twice:
        assert twice.endpoints == [serving_address] * 2
        for _ in range(4):
            np.testing.assert_array_equal(twice.lookup("srv_users", keys), expected)
        assert twice.status()["mode"] == "follow"
    # With a dead endpoint in the list every call still succeeds, promptly:
    # an UNAVAILABLE endpoint is retried on the next one without backoff.
    dead = f"127.0.0.1:{free_port()}"
    for endpoints in ([dead, serving_address], [serving_address, dead]):
        with strata.ServingClient(endpoints, timeout=5.0) as mixed:
            for _ in range(4):
                start = time.monotonic()
                np.testing.assert_array_equal(mixed.lookup("srv_users", keys),
                                              expected)
                assert time.monotonic() - start < 2.0


# Exclusive: it bounds the wall time of a 1 s deadline (0.8-3 s).
@pytest.mark.exclusive
def test_dead_endpoint_raises_unavailable_after_the_deadline():
    dead = f"127.0.0.1:{free_port()}"
    with strata.ServingClient(dead, timeout=1.0) as client:
        start = time.monotonic()
        with pytest.raises(strata.UnavailableError) as info:
            client.lookup("srv_users", [1])
        elapsed = time.monotonic() - start
        assert 0.8 <= elapsed < 3.0, elapsed
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert dead in str(info.value)
        # A per-call timeout overrides the client's.
        start = time.monotonic()
        with pytest.raises(strata.UnavailableError):
            client.status(timeout=0.3)
        assert 0.2 <= time.monotonic() - start < 2.0


@pytest.mark.parametrize("method", ["Lookup", "Status"])
def test_a_serving_request_that_does_not_parse_is_invalid_argument(
        serving_address, method):
    import grpc
    with grpc.insecure_channel(serving_address) as channel:
        call = channel.unary_unary(f"/strata.v1.ServingService/{method}")
        with pytest.raises(grpc.RpcError) as raised:
            call(b"\xff\xff\xff", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert method in raised.value.details()
