"""Small client of the training shards (strata-server), for tests and tools.

Routes keys as the C++ PsClient does (hashing.py), one request per shard.
Workers should use the C++ client; this one is sequential and unbatched.
"""

import time
import uuid

import grpc
import numpy as np

from ._keys import as_keys
from ._proto import strata_pb2, strata_pb2_grpc
from ._rpc import EndpointPool, RetryPolicy
from .errors import InternalError, InvalidArgumentError
from .hashing import shards_of

_OPTIMIZERS = {"sgd": strata_pb2.SGD, "adagrad": strata_pb2.ADAGRAD,
               "adam": strata_pb2.ADAM, "ftrl": strata_pb2.FTRL}
_INITIALIZERS = {"zeros": strata_pb2.ZEROS, "constant": strata_pb2.CONSTANT,
                 "uniform": strata_pb2.UNIFORM,
                 "truncated_normal": strata_pb2.TRUNCATED_NORMAL}


class ParameterServerClient:
    """Talks to every shard of a training cluster.

    `shards`: "host:port" of every shard, in shard-index order. Each call to
    a shard has a deadline of `timeout` seconds and retries UNAVAILABLE with
    backoff until then. Pushes carry `client_id` (random unless given) and a
    sequence number, so a retried push is applied once.

    Example:
        ps = strata.ParameterServerClient(["127.0.0.1:50051", "127.0.0.1:50052"])
        ps.create_table("user", dim=8, optimizer="sgd", learning_rate=0.1)
        ps.push("user", [1, 2], np.ones((2, 8), np.float32))
        rows = ps.pull("user", [1, 2])
    """

    def __init__(self, shards, timeout=10.0, client_id=None,
                 initial_backoff=0.05, max_backoff=1.0):
        policy = RetryPolicy(timeout, initial_backoff, max_backoff)
        shards = [shards] if isinstance(shards, str) else list(shards)
        if not shards:
            raise ValueError("no shard addresses given")
        self._shards = [EndpointPool(s, policy, strata_pb2_grpc.ParameterServerStub)
                        for s in shards]
        self.client_id = client_id or f"py-{uuid.uuid4().hex}"
        # As the C++ PsClient: sequences start at the time in microseconds, so
        # a restarted client with the same id is not taken for a retry.
        self._next_sequence = max(1, time.time_ns() // 1000)

    @property
    def num_shards(self):
        return len(self._shards)

    def create_table(self, name, dim, optimizer="adagrad", learning_rate=0.0,
                     initializer="zeros", seed=0, optimizer_args=None,
                     initializer_args=None):
        """Creates `name` on every shard. optimizer_args: other
        OptimizerConfig fields (epsilon, beta1, beta2, initial_accumulator,
        ftrl_beta, l1, l2); initializer_args: InitializerConfig fields (value,
        min, max, mean, stddev). Returns False when an identical table already
        existed everywhere."""
        try:
            config = strata_pb2.TableConfig(
                name=name, dim=dim, seed=seed,
                optimizer=strata_pb2.OptimizerConfig(
                    type=_OPTIMIZERS[optimizer], learning_rate=learning_rate,
                    **(optimizer_args or {})),
                initializer=strata_pb2.InitializerConfig(
                    type=_INITIALIZERS[initializer], **(initializer_args or {})))
        except KeyError as e:
            raise ValueError(f"unknown optimizer or initializer {e}") from None
        request = strata_pb2.CreateTableRequest(config=config)
        created = [s.call("CreateTable", request).created for s in self._shards]
        return any(created)

    def pull(self, table, keys):
        """Rows of `keys` (1-D ids) as float32 (len(keys), dim)."""
        ids = self._ids(table, keys)
        unique, inverse = np.unique(ids, return_inverse=True)
        rows, dim = None, None
        for shard, positions in self._route(table, unique):
            request = strata_pb2.PullRequest(batches=[strata_pb2.TableBatch(
                table=table, keys=unique[positions].tolist())])
            response = self._shards[shard].call("Pull", request)
            values = np.array(response.batches[0].values, dtype=np.float32)
            if len(response.batches) != 1 or values.size % positions.size:
                raise InternalError(grpc.StatusCode.INTERNAL,
                                    f"pull from shard {shard}: malformed answer")
            dim = values.size // positions.size
            if rows is None:
                rows = np.empty((unique.size, dim), dtype=np.float32)
            rows[positions] = values.reshape(positions.size, dim)
        return rows[inverse.reshape(-1)]

    def push(self, table, keys, gradients):
        """Applies `gradients` (len(keys) x dim, or flat) to the rows of
        `keys`; gradients of duplicate keys are summed first. Returns True
        when every shard took it as a duplicate of an applied push."""
        ids = self._ids(table, keys)
        grads = np.asarray(gradients, dtype=np.float32)
        if grads.size == 0 or grads.size % ids.size:
            raise ValueError(f"push to '{table}': {grads.size} gradients for "
                             f"{ids.size} keys is not a whole number of rows")
        grads = grads.reshape(ids.size, -1)
        unique, inverse = np.unique(ids, return_inverse=True)
        summed = np.zeros((unique.size, grads.shape[1]), dtype=np.float32)
        np.add.at(summed, inverse.reshape(-1), grads)
        sequence = self._next_sequence
        self._next_sequence += 1
        duplicate = True
        for shard, positions in self._route(table, unique):
            request = strata_pb2.PushRequest(
                batches=[strata_pb2.TableBatch(
                    table=table, keys=unique[positions].tolist(),
                    values=summed[positions].reshape(-1).tolist())],
                client_id=self.client_id, sequence=sequence)
            duplicate &= self._shards[shard].call("Push", request).duplicate
        return duplicate

    def close(self):
        for shard in self._shards:
            shard.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ids(self, table, keys):
        ids = as_keys(keys)
        if ids.size == 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"no keys for table '{table}'")
        return ids

    def _route(self, table, unique):
        """(shard, positions in `unique`) for each shard that owns a key."""
        owners = shards_of(table, unique, len(self._shards))
        for shard in np.unique(owners):
            yield int(shard), np.flatnonzero(owners == shard)
