"""ParameterServerClient follows a changed shard map: two live shards of
their own, a bucket given from shard 1 to shard 0 (SetShardMap on both), and
a client that still routes by the first map."""

import grpc
import numpy as np
import pytest

import strata
from strata._proto import strata_pb2, strata_pb2_grpc
from strata.hashing import NUM_BUCKETS, buckets_of
from strata_cluster import Cluster, binary

TABLE = "py_moved"


@pytest.fixture(scope="module")
def shards():
    cluster = Cluster("strata-py-map-")
    try:
        server = binary("strata-server")
        started = [cluster.start(f"shard{i}", [
            server, "--port=0", "--host=127.0.0.1", f"--shard_index={i}",
            "--num_shards=2", f"--data_dir={cluster.workdir / f'shard{i}'}",
            "--log_level=warning"]) for i in range(2)]
        yield [shard.wait_ready() for shard in started]
    finally:
        cluster.stop()


def set_map_on_every_shard(addresses, version, owners):
    request = strata_pb2.SetShardMapRequest(map=strata_pb2.ShardMap(
        version=version, num_shards=len(addresses),
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
        set_map_on_every_shard(shards, 2, new_owners)

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
