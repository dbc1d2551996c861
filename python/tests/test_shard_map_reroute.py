"""ParameterServerClient follows a changed shard map: two live shards of
their own, a bucket given from shard 1 to shard 0 (SetShardMap), and a
client that still routes by the older map."""

import grpc
import numpy as np
import pytest

import strata
from strata._proto import strata_pb2, strata_pb2_grpc
from strata.hashing import NUM_BUCKETS, buckets_of
from strata_cluster import Cluster

TABLE = "py_moved"


@pytest.fixture(scope="module")
def daemons():
    cluster = Cluster("strata-py-map-")
    try:
        yield cluster.start_shards(2)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def shards(daemons):
    return [daemon.address for daemon in daemons]


def set_map(addresses, version, owners, num_shards=2):
    request = strata_pb2.SetShardMapRequest(map=strata_pb2.ShardMap(
        version=version, num_shards=num_shards,
        bucket_owners=[int(o) for o in owners]))
    for address in addresses:
        with grpc.insecure_channel(address) as channel:
            answer = strata_pb2_grpc.ParameterServerStub(channel).SetShardMap(
                request, timeout=10)
            assert answer.changed


def test_a_client_of_the_old_map_reroutes_and_pushes_exactly_once(shards):
    keys = np.arange(1, 41, dtype=np.uint64)
    owners = np.arange(NUM_BUCKETS) % 2
    buckets = buckets_of(TABLE, keys).astype(np.int64)
    moved = int(buckets[np.flatnonzero(owners[buckets] == 1)[0]])

    with strata.ParameterServerClient(shards, timeout=20) as stale, \
            strata.ParameterServerClient(shards, timeout=20) as fresh:
        assert stale.create_table(TABLE, dim=3, optimizer="sgd",
                                  learning_rate=1.0, initializer="uniform",
                                  seed=4)
        initial = stale.pull(TABLE, keys)
        assert stale.shard_map_version == 1

        new_owners = owners.copy()
        new_owners[moved] = 0
        set_map(shards, 2, new_owners)

        # Shard 1 refuses the old routing; the client fetches version 2 and
        # sends the refused keys again, once.
        stale.push(TABLE, keys, np.ones((keys.size, 3), np.float32))
        assert stale.shard_map_version == 2
        np.testing.assert_array_equal(fresh.pull(TABLE, keys), initial - 1)
        assert fresh.shard_map_version == 2
        version, served = fresh.shard_map()
        assert version == 2 and served[moved] == 0

        # The moved bucket's keys answer from shard 0 only.
        moved_keys = keys[buckets == moved].tolist()
        request = strata_pb2.PullRequest(
            batches=[strata_pb2.TableBatch(table=TABLE, keys=moved_keys)],
            shard_map_version=2)
        with grpc.insecure_channel(shards[1]) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                strata_pb2_grpc.ParameterServerStub(channel).Pull(
                    request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert ("strata-shard-map-version", "2") in \
            refused.value.trailing_metadata()


def test_a_shard_that_is_down_does_not_hold_up_a_reroute(daemons, shards):
    # Keys shard 1 owns, and a bucket of shard 1 none of them is in, given to
    # shard 0 in version 3 on shard 1 only; then shard 0 goes down.
    with strata.ParameterServerClient(shards, timeout=3) as stale:
        version, owners = stale.shard_map()
        assert version == 2
        stale.refresh_shard_map()
        candidates = np.arange(1, 400, dtype=np.uint64)
        buckets = buckets_of(TABLE, candidates).astype(np.int64)
        keys = candidates[owners[buckets] == 1][:20]
        used = set(buckets_of(TABLE, keys).astype(np.int64).tolist())
        empty = next(b for b in range(1, NUM_BUCKETS, 2)
                     if owners[b] == 1 and b not in used)
        before = stale.pull(TABLE, keys)
        new_owners = owners.copy()
        new_owners[empty] = 0
        set_map(shards[1:], 3, new_owners)
        daemons[0].stop()
        # Shard 1 refuses version 2; the client asks shard 1 alone for the
        # map (asking shard 0 would wait out the timeout) and pulls again.
        np.testing.assert_array_equal(stale.pull(TABLE, keys), before)
        assert stale.shard_map_version == 3
