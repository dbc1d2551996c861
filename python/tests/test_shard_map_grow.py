"""ParameterServerClient follows a running cluster that grows and shrinks:
two live shards and two more started for a cluster of four, `stratactl
reshard` moving buckets while the client's rows stay exact."""

import subprocess
import time

import numpy as np
import pytest

import strata
from strata.errors import FailedPreconditionError
from strata.hashing import buckets_of
from strata_cluster import Cluster, binary

TABLE = "py_grown"
DIM = 3


@pytest.fixture(scope="module")
def daemons():
    cluster = Cluster("strata-py-grow-")
    try:
        shards = cluster.start_shards(2)
        for index in (2, 3):
            shards.append(cluster.start_shard(
                f"shard{index}", f"--shard_index={index}", "--num_shards=4"))
        for shard in shards[2:]:
            shard.wait_ready()
        yield shards
    finally:
        cluster.stop()


def reshard(first, to):
    done = subprocess.run(
        [binary("stratactl"), f"--shards={','.join(first)}", "reshard",
         f"--to_shards={','.join(to)}"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stderr + done.stdout


def test_a_client_of_two_shards_follows_a_grow_to_four_and_a_shrink_to_three(
        daemons):
    addresses = [d.address for d in daemons]
    keys = np.arange(1, 2001, dtype=np.uint64)
    ones = np.ones((keys.size, DIM), np.float32)
    with strata.ParameterServerClient(addresses[:2], timeout=20) as client:
        assert client.create_table(TABLE, dim=DIM, optimizer="sgd",
                                   learning_rate=1.0, initializer="uniform",
                                   seed=5)
        # SGD with rate 1: each push subtracts one, in float32, as here.
        expected = client.pull(TABLE, keys)
        client.push(TABLE, keys, ones)
        expected = expected - ones
        assert client.num_shards == 2

        reshard(addresses[:2], addresses)
        # The old map is refused; the new one names shards 2 and 3, which the
        # client reaches from there. Every key moves by exactly one step.
        client.push(TABLE, keys, ones)
        expected = expected - ones
        assert client.num_shards == 4
        assert client.addresses == addresses
        np.testing.assert_array_equal(client.pull(TABLE, keys), expected)
        rows = [sum(t.num_rows for t in s.tables) for s in client.stats()]
        assert len(rows) == 4 and sum(rows) == keys.size
        assert all(r > 300 for r in rows), rows

        # A client that routes by the four-shard map when the cluster
        # shrinks (its map fetched now).
        stale = strata.ParameterServerClient(addresses, timeout=20)
        stale.refresh_shard_map()
        assert stale.num_shards == 4
        _, four_shard_owners = stale.shard_map()

        reshard(addresses, addresses[:3])
        client.push(TABLE, keys, ones)
        expected = expected - ones
        assert client.num_shards == 3
        np.testing.assert_array_equal(client.pull(TABLE, keys), expected)
        # The removed shard is out of every call that goes to all shards.
        assert len(client.stats()) == 3
        assert list(client.health()) == addresses[:3]
        assert sum(t["num_rows"] for t in client.list_tables()
                   if t["name"] == TABLE) == keys.size

        # The removed shard stops. The stale client's pull of keys that
        # were the removed shard's goes only there; after a second without
        # an answer it asks the others for a newer map and gets the rows
        # from their new owners, long before its 20 s deadline.
        daemons[3].proc.kill()
        daemons[3].proc.wait(10)
        was_on_removed = keys[four_shard_owners[
            buckets_of(TABLE, keys).astype(np.int64)] == 3]
        assert was_on_removed.size > 300
        start = time.monotonic()
        rows = stale.pull(TABLE, was_on_removed)
        elapsed = time.monotonic() - start
        np.testing.assert_array_equal(
            rows, expected[np.searchsorted(keys, was_on_removed)])
        assert stale.num_shards == 3
        assert elapsed < 10, elapsed
        stale.close()


def test_a_client_given_too_few_shards_of_a_static_cluster_is_told_so():
    """A static cluster's map names no addresses: a client given one shard
    of two cannot reach the other and says what to do."""
    cluster = Cluster("strata-py-short-")
    try:
        shards = cluster.start_shards(2)
        with strata.ParameterServerClient([shards[0].address],
                                          timeout=5) as one:
            one.create_table("short", dim=2)
            with pytest.raises(FailedPreconditionError,
                               match="names no addresses: give it every"):
                one.pull("short", np.arange(1, 101, dtype=np.uint64))
            assert one.num_shards == 1
    finally:
        cluster.stop()
