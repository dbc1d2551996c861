"""A shard that answers a pull slowly is waited for: the client's escape
from an unreachable shard (asking the others for a newer map after a
second) reacts to UNAVAILABLE only, so a slow pull is neither cut off nor
sent twice. The shard here is an in-process gRPC server that takes 1.5 s
to answer."""

import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

import strata
from strata._proto import strata_pb2, strata_pb2_grpc

DIM = 2


class SlowShard(strata_pb2_grpc.ParameterServerServicer):
    """Answers every pull after `delay` seconds with row k = [k, -k]."""

    def __init__(self, delay):
        self.delay = delay
        self.pulls = 0
        self.lock = threading.Lock()

    def Pull(self, request, context):
        with self.lock:
            self.pulls += 1
        time.sleep(self.delay)
        batches = []
        for batch in request.batches:
            values = []
            for key in batch.keys:
                values += [float(key), -float(key)]
            batches.append(strata_pb2.TableBatch(values=values))
        return strata_pb2.PullResponse(batches=batches)


# Exclusive: it bounds the pull's wall time (1.4-5 s for a 1.5 s answer).
@pytest.mark.exclusive
def test_a_slow_pull_is_waited_for_and_sent_once():
    shard = SlowShard(delay=1.5)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    strata_pb2_grpc.add_ParameterServerServicer_to_server(shard, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with strata.ParameterServerClient([f"127.0.0.1:{port}"],
                                          timeout=10) as client:
            keys = np.arange(1, 6, dtype=np.uint64)
            start = time.monotonic()
            rows = client.pull("slow", keys)
            elapsed = time.monotonic() - start
        expected = np.stack([keys, -keys.astype(np.float64)], axis=1)
        np.testing.assert_array_equal(rows, expected.astype(np.float32))
        assert rows.shape == (5, DIM)
        assert 1.4 < elapsed < 5, elapsed
        assert shard.pulls == 1
    finally:
        server.stop(0)
