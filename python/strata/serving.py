"""Client of the serving PS (strata-serving): read-only lookups."""

import grpc
import numpy as np

from ._concurrency_limit import AdaptiveConcurrencyLimit
from ._keys import as_keys
from ._proto import strata_pb2, strata_pb2_grpc
from ._rpc import EndpointPool, RetryPolicy
from ._throttle import AdaptiveThrottle
from .errors import InternalError, InvalidArgumentError


class ServingClient:
    """Looks up embeddings on one or more serving PS replicas.

    `endpoints` is "host:port" or a list of them; calls go round-robin over
    the list and a replica answering UNAVAILABLE or RESOURCE_EXHAUSTED is
    retried on the next one, with backoff, until the call's deadline of
    `timeout` seconds (retries included). While the replicas refuse calls
    for overload, the client sends about `throttle_k` calls per accepted one
    and fails the other attempts itself, without a call (0 turns that off).
    With `adaptive_concurrency_limit=True` it also bounds its calls in
    flight over all threads sharing it (from 16, growing while answered,
    shrinking on refusals) and fails calls past the bound itself: the
    replicas then refuse few calls under overload. Off by default: a client
    shared by more than 16 threads would fail calls while the bound grows.
    With `fp16=True` the rows travel as IEEE half floats: half the bytes,
    about three significant digits; lookup() still returns float32.
    Errors raise StrataError subclasses (errors.py). Thread-safe.

    Example:
        with strata.ServingClient(["10.0.0.5:50070", "10.0.0.6:50070"]) as c:
            rows = c.lookup("user", [17, 42])   # float32, shape (2, dim)
    """

    def __init__(self, endpoints, timeout=5.0, initial_backoff=0.05,
                 max_backoff=1.0, backoff_multiplier=2.0, throttle_k=2.0,
                 fp16=False, adaptive_concurrency_limit=False):
        policy = RetryPolicy(timeout, initial_backoff, max_backoff,
                             backoff_multiplier)
        throttle = AdaptiveThrottle(throttle_k) if throttle_k else None
        limit = (AdaptiveConcurrencyLimit() if adaptive_concurrency_limit
                 else None)
        self._encoding = strata_pb2.FLOAT16 if fp16 else strata_pb2.FLOAT32
        self._pool = EndpointPool(endpoints, policy,
                                  strata_pb2_grpc.ServingServiceStub,
                                  throttle=throttle, limit=limit)

    @property
    def endpoints(self):
        return list(self._pool.endpoints)

    def lookup(self, table, keys, timeout=None):
        """Rows of `keys` in `table` as a float32 array of shape
        (len(keys), dim), row i belonging to keys[i] (duplicates repeated).
        Keys the serving PS holds no row for get the table's default.

        `keys`: a 1-D list/tuple/array of ids in [0, 2^64-1]. Raises
        ValueError, before any call, for negative, too large or non-integer
        ids or a non 1-D `keys`, and InvalidArgumentError (a ValueError too)
        for an empty `keys`; NotFoundError for an unknown table.
        """
        ids = as_keys(keys)
        if ids.size == 0:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"lookup in table '{table}' with no keys")
        request = strata_pb2.LookupRequest(table=table, keys=ids.tolist(),
                                           encoding=self._encoding)
        response = self._pool.call("Lookup", request, timeout)
        if self._encoding == strata_pb2.FLOAT16:
            values = np.frombuffer(response.values_fp16,
                                   dtype="<f2").astype(np.float32)
        else:
            values = np.array(response.values, dtype=np.float32)
        if response.dim == 0 or values.size != ids.size * response.dim:
            raise InternalError(
                grpc.StatusCode.INTERNAL,
                f"lookup in table '{table}': {values.size} values for "
                f"{ids.size} keys of dim {response.dim}")
        return values.reshape(ids.size, response.dim)

    def status(self, timeout=None):
        """What the serving PS follows and how fresh it is, as a dict:
        {"mode": "follow" | "offline",
         "shards": [{"shard_index", "address", "connected", "incarnation",
                     "applied", "latest", "lag", "lag_seconds",
                     "last_error"}, ...],   # lag = latest - applied
         "tables": [{"name", "dim", "num_rows", "memory_bytes"}, ...]}
        """
        response = self._pool.call("Status", strata_pb2.ServingStatusRequest(),
                                   timeout)
        return {
            "mode": response.mode,
            "shards": [{
                "shard_index": s.shard_index,
                "address": s.address,
                "connected": s.connected,
                "incarnation": s.incarnation,
                "applied": s.applied_sequence,
                "latest": s.latest_sequence,
                "lag": max(0, s.latest_sequence - s.applied_sequence),
                "lag_seconds": s.lag_seconds,
                "last_error": s.last_error,
            } for s in response.shards],
            "tables": [{
                "name": t.config.name,
                "dim": t.config.dim,
                "num_rows": t.num_rows,
                "memory_bytes": t.memory_bytes,
            } for t in response.tables],
        }

    def close(self):
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
