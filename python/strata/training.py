"""Client of the training shards (strata-server): admin calls, and pulls and
pushes for tests and tools.

Routes keys as the C++ PsClient does (hashing.py), one request per shard.
Workers should use the C++ client; this one is sequential and unbatched.
"""

import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import grpc
import numpy as np

from ._keys import as_keys
from ._proto import health_pb2, health_pb2_grpc, strata_pb2, strata_pb2_grpc
from ._rpc import EndpointPool, RetryPolicy
from .errors import (DeadlineExceededError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, UnavailableError)
from .hashing import NUM_BUCKETS, buckets_of

# How many times one call fetches a newer shard map and routes again before
# it gives up (as the C++ PsClient).
_MAX_REROUTES = 8

# A pull that cannot reach its shard for this long asks the other shards
# whether the map moved on: a reshard may have removed that shard, and its
# keys are elsewhere now (as the C++ PsClient does).
_ASK_OTHERS_AFTER_S = 1.0


class _MapMovedOn(Exception):
    """A pull's shard did not answer and the others serve a newer map, which
    this client now routes by: the pull goes again."""

# A table's optimizer and initializer by name, with the numbers of
# strata.v1.OptimizerType and InitializerType (which the C client,
# strata_tf_client.h, uses too), and the names of their arguments (the
# fields of strata.v1.OptimizerConfig and InitializerConfig).
OPTIMIZER_TYPES = {"sgd": strata_pb2.SGD, "adagrad": strata_pb2.ADAGRAD,
                   "adam": strata_pb2.ADAM, "ftrl": strata_pb2.FTRL}
INITIALIZER_TYPES = {"zeros": strata_pb2.ZEROS,
                     "constant": strata_pb2.CONSTANT,
                     "uniform": strata_pb2.UNIFORM,
                     "truncated_normal": strata_pb2.TRUNCATED_NORMAL}
OPTIMIZER_ARGS = ("initial_accumulator", "epsilon", "beta1", "beta2",
                  "ftrl_beta", "l1", "l2")
INITIALIZER_ARGS = ("value", "min", "max", "mean", "stddev")


# The defaults of a new table, the same here, in strata.tf.Embedding and in
# strata-worker: Adagrad (learning rate 0.05, initial accumulator 0.1) over
# rows drawn from a truncated normal of stddev 0.01.
DEFAULT_OPTIMIZER = "adagrad"
DEFAULT_LEARNING_RATE = 0.05
DEFAULT_INITIALIZER = "truncated_normal"


def default_optimizer_args(optimizer: str) -> Dict[str, float]:
    return {"initial_accumulator": 0.1} if optimizer == "adagrad" else {}


def default_initializer_args(initializer: str) -> Dict[str, float]:
    return {"stddev": 0.01} if initializer == "truncated_normal" else {}


def check_table_options(who: str, optimizer: str, initializer: str,
                        optimizer_args: Optional[Mapping[str, float]],
                        initializer_args: Optional[Mapping[str, float]]
                        ) -> None:
    """ValueError, its message starting with `who`, naming an unknown
    optimizer, initializer, or optimizer or initializer argument, with the
    names it could have been."""
    for what, given, known in (("optimizer", [optimizer], OPTIMIZER_TYPES),
                               ("initializer", [initializer],
                                INITIALIZER_TYPES),
                               ("optimizer argument", optimizer_args or {},
                                OPTIMIZER_ARGS),
                               ("initializer argument", initializer_args or {},
                                INITIALIZER_ARGS)):
        for name in given:
            if name not in known:
                raise ValueError(f"{who}: unknown {what} {name!r} (want one "
                                 f"of {', '.join(known)})")


# create_table(admission=..., eviction=...) keys -> TableConfig fields.
_ADMISSION = {"min_count": "admit_min_count",
              "probability": "admit_probability",
              "sketch_width": "admit_sketch_width",
              "sketch_depth": "admit_sketch_depth"}
_EVICTION = {"after_steps": "evict_after_steps",
             "after_seconds": "evict_after_seconds",
             "min_norm": "evict_min_norm"}


def _policy_fields(what: str, given: Optional[Mapping[str, Any]],
                   names: Mapping[str, str]) -> Dict[str, Any]:
    fields = {}
    for key, value in (given or {}).items():
        if key not in names:
            raise ValueError(f"unknown {what} option {key!r} (want one of "
                             f"{', '.join(sorted(names))})")
        fields[names[key]] = value
    return fields


class ParameterServerClient:
    """Talks to every shard of a training cluster.

    `shards`: "host:port" of every shard, in shard-index order (a list, or
    one string with commas, as strata.tf takes them; a replicated shard is
    its replicas joined by "|", and calls follow its primary). Each call to
    a shard has a deadline of `timeout` seconds and retries UNAVAILABLE with
    backoff until then. Pushes carry `client_id` (random unless given) and a
    sequence number, so a retried push is applied once. Keys are routed by
    the cluster's shard map (buckets to shards, versioned); when a shard
    refuses a request routed by an older map, the client fetches the newest
    one and routes the refused keys again, without raising; a pull that
    cannot reach its shard for a second asks the other shards for a newer
    map (a reshard may have removed that shard) and, given one, goes again
    by it.

    Example:
        ps = strata.ParameterServerClient(["127.0.0.1:50051", "127.0.0.1:50052"])
        ps.create_table("user", dim=8, optimizer="sgd", learning_rate=0.1)
        ps.push("user", [1, 2], np.ones((2, 8), np.float32))
        rows = ps.pull("user", [1, 2])
    """

    def __init__(self, shards: Union[str, Sequence[str]], timeout: float = 10.0,
                 client_id: Optional[str] = None,
                 initial_backoff: float = 0.05, max_backoff: float = 1.0):
        policy = RetryPolicy(timeout, initial_backoff, max_backoff)
        if isinstance(shards, str):  # "host:port" or "host:port,host:port"
            shards = [s.strip() for s in shards.split(",")]
        shards = list(shards)
        if not shards or not all(shards):
            raise ValueError(f"no or empty shard address in {shards!r}")
        self._policy = policy
        self.addresses: List[str] = []
        self._shards: List[EndpointPool] = []
        self._health: List[EndpointPool] = []
        for address in shards:
            self._connect(address)
        self.client_id = client_id or f"py-{uuid.uuid4().hex}"
        # As the C++ PsClient: sequences start at the time in microseconds, so
        # a restarted client with the same id is not taken for a retry.
        self._next_sequence = max(1, time.time_ns() // 1000)
        # The map a new cluster has: bucket b on shard b mod num_shards.
        # (version, owner of each bucket, shard count), replaced as a whole.
        self._map = (1, np.arange(NUM_BUCKETS, dtype=np.int64) % len(shards),
                     len(shards))

    def _connect(self, address):
        """Adds shard len(self._shards) at `address`. A replicated shard is
        its replicas joined by "|": calls follow its primary."""
        self.addresses.append(address)
        self._shards.append(EndpointPool(
            address, self._policy, strata_pb2_grpc.ParameterServerStub,
            follow_primary=True))
        self._health.append(EndpointPool(address, self._policy,
                                         health_pb2_grpc.HealthStub))

    @property
    def num_shards(self):
        """The shard count of the map this client routes by: it changes when
        `stratactl reshard` grows or shrinks the cluster."""
        return self._map[2]

    def _members(self):
        """The pools of the shards in the map (a removed shard is left)."""
        return self._shards[:self.num_shards]

    def create_table(self, name: str, dim: int,
                     optimizer: str = DEFAULT_OPTIMIZER,
                     learning_rate: float = DEFAULT_LEARNING_RATE,
                     initializer: str = DEFAULT_INITIALIZER, seed: int = 0,
                     optimizer_args: Optional[Mapping[str, float]] = None,
                     initializer_args: Optional[Mapping[str, float]] = None,
                     admission: Optional[Mapping[str, Any]] = None,
                     eviction: Optional[Mapping[str, Any]] = None,
                     memory_budget_bytes: int = 0,
                     timeout: Optional[float] = None) -> bool:
        """Creates `name` on every shard; every option of strata.v1.TableConfig.

        optimizer: sgd, adagrad, adam or ftrl; optimizer_args: epsilon,
          beta1, beta2, initial_accumulator, ftrl_beta, l1, l2 (default for
          adagrad: initial_accumulator 0.1).
        initializer: zeros, constant, uniform or truncated_normal;
          initializer_args: value, min, max, mean, stddev (default for
          truncated_normal: stddev 0.01).
        admission: min_count, probability, sketch_width, sketch_depth (a key
          gets a row only once admitted). eviction: after_steps,
          after_seconds, min_norm. memory_budget_bytes: rows past it live on
          disk only (0: no budget).
        The defaults are strata.tf.Embedding's. Returns False when an
        identical table already existed everywhere; AlreadyExistsError when
        one exists with another config."""
        if optimizer_args is None:
            optimizer_args = default_optimizer_args(optimizer)
        if initializer_args is None:
            initializer_args = default_initializer_args(initializer)
        check_table_options("strata", optimizer, initializer, optimizer_args,
                            initializer_args)
        config = strata_pb2.TableConfig(
            name=name, dim=dim, seed=seed,
            optimizer=strata_pb2.OptimizerConfig(
                type=OPTIMIZER_TYPES[optimizer], learning_rate=learning_rate,
                **optimizer_args),
            initializer=strata_pb2.InitializerConfig(
                type=INITIALIZER_TYPES[initializer], **initializer_args),
            memory_budget_bytes=memory_budget_bytes,
            **_policy_fields("admission", admission, _ADMISSION),
            **_policy_fields("eviction", eviction, _EVICTION))
        request = strata_pb2.CreateTableRequest(config=config)
        created = [s.call("CreateTable", request, timeout).created
                   for s in self._members()]
        return any(created)

    def list_tables(self, timeout: Optional[float] = None
                    ) -> List[Dict[str, Any]]:
        """Every table, with its config (a strata.v1.TableConfig) and, summed
        over the shards: num_rows, rows_in_memory, memory_bytes,
        admitted_keys, rejected_gradients, evicted_rows."""
        counters = ("num_rows", "rows_in_memory", "memory_bytes",
                    "admitted_keys", "rejected_gradients", "evicted_rows")
        tables: Dict[str, Dict[str, Any]] = {}
        for shard in self._members():
            answer = shard.call("ListTables", strata_pb2.ListTablesRequest(),
                                timeout)
            for info in answer.tables:
                table = tables.setdefault(info.config.name, dict(
                    name=info.config.name, dim=info.config.dim,
                    config=info.config, **{c: 0 for c in counters}))
                for c in counters:
                    table[c] += getattr(info, c)
        return [tables[name] for name in sorted(tables)]

    def stats(self, timeout: Optional[float] = None
              ) -> List["strata_pb2.StatsResponse"]:
        """Each shard's strata.v1.StatsResponse (counters, tables,
        checkpoints, write failures), in shard-index order."""
        return [s.call("Stats", strata_pb2.StatsRequest(), timeout)
                for s in self._members()]

    def health(self, timeout: Optional[float] = None) -> Dict[str, str]:
        """address -> grpc.health.v1 status name ("SERVING", "NOT_SERVING")
        of every shard; a shard that stays unreachable raises
        UnavailableError naming it."""
        names = health_pb2.HealthCheckResponse.ServingStatus
        return {address: names.Name(
                    pool.call("Check", health_pb2.HealthCheckRequest(),
                              timeout).status)
                for address, pool in zip(self.addresses[:self.num_shards],
                                         self._health)}

    def checkpoint(self, checkpoint_id: str = "", global_step: int = 0,
                   incremental: bool = False,
                   timeout: Optional[float] = None) -> Dict[str, Any]:
        """Checkpoints every shard under one id ("" picks
        "step-<global_step>"); incremental: only rows changed since each
        shard's previous one. Returns checkpoint_id, global_step, num_rows
        (summed) and the per-shard answers (`shards`)."""
        request = strata_pb2.CheckpointRequest(
            checkpoint_id=checkpoint_id, global_step=global_step,
            incremental=incremental)
        answers = [s.call("Checkpoint", request, timeout)
                   for s in self._members()]
        return dict(checkpoint_id=answers[0].checkpoint_id,
                    global_step=answers[0].global_step,
                    num_rows=sum(a.num_rows for a in answers), shards=answers)

    def restore(self, checkpoint_id: str,
                timeout: Optional[float] = None) -> Dict[str, Any]:
        """Restores every shard to `checkpoint_id`. Returns global_step and
        num_rows (summed)."""
        request = strata_pb2.RestoreRequest(checkpoint_id=checkpoint_id)
        answers = [s.call("Restore", request, timeout)
                   for s in self._members()]
        return dict(global_step=answers[0].global_step,
                    num_rows=sum(a.num_rows for a in answers))

    def pull(self, table: str, keys, timeout: Optional[float] = None
             ) -> np.ndarray:
        """Rows of `keys` (1-D ids) as float32 (len(keys), dim)."""
        ids = self._ids(table, keys)
        unique, inverse = np.unique(ids, return_inverse=True)
        for _ in range(_MAX_REROUTES):
            try:
                rows = self._pull_routed(table, unique, timeout)
                return rows[inverse.reshape(-1)]
            except FailedPreconditionError as e:
                # Pulls are idempotent: all of it goes again by the new map.
                if e.shard_map_version is None:
                    raise
                self.refresh_shard_map(e.shard_map_version, timeout,
                                       self._shards_named(e.endpoint))
            except _MapMovedOn:
                pass
        raise self._too_many_reroutes("pull")

    def _pull_from(self, shard, request, timeout):
        """Shard `shard`'s answer to `request`; raises _MapMovedOn when the
        shard cannot be reached for _ASK_OTHERS_AFTER_S while the other
        shards serve a newer map (a slow answer is waited for)."""
        budget = self._policy.timeout if timeout is None else float(timeout)
        moved = []
        asked_at = [0.0]

        def map_moved_on(elapsed):
            if elapsed - asked_at[0] < _ASK_OTHERS_AFTER_S:
                return False
            asked_at[0] = elapsed
            if self._newer_map_elsewhere(shard, budget):
                moved.append(True)
            return bool(moved)

        try:
            return self._shards[shard].call("Pull", request, timeout,
                                            give_up=map_moved_on)
        except UnavailableError:
            if moved:
                raise _MapMovedOn() from None
            raise

    def _newer_map_elsewhere(self, silent, timeout):
        """Whether the shards other than `silent` that answer serve a map
        newer than this client's; if so, routes by it from now on."""
        others = [index for index in range(self.num_shards) if index != silent]
        newest = self._newest_map(min(timeout, _ASK_OTHERS_AFTER_S), others,
                                  skip_unreachable=True)
        if newest is None or newest.version <= self.shard_map_version:
            return False
        self._install_map(newest)
        return True

    def _pull_routed(self, table, unique, timeout):
        rows, dim = None, None
        for shard, positions in self._route(table, unique):
            request = strata_pb2.PullRequest(
                batches=[strata_pb2.TableBatch(
                    table=table, keys=unique[positions].tolist())],
                shard_map_version=self.shard_map_version)
            response = self._pull_from(shard, request, timeout)
            values = np.array(response.batches[0].values, dtype=np.float32)
            if len(response.batches) != 1 or values.size % positions.size:
                raise InternalError(grpc.StatusCode.INTERNAL,
                                    f"pull from shard {shard}: malformed answer")
            dim = values.size // positions.size
            if rows is None:
                rows = np.empty((unique.size, dim), dtype=np.float32)
            rows[positions] = values.reshape(positions.size, dim)
        return rows

    def push(self, table: str, keys, gradients,
             timeout: Optional[float] = None) -> bool:
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
        duplicate = True
        for _ in range(_MAX_REROUTES):
            # Each round has its own sequence: a shard that applied its part
            # of an earlier round would take the old one for a retry.
            sequence = self._next_sequence
            self._next_sequence += 1
            refused, refusing, newest = [], [], 0
            for shard, positions in self._route(table, unique):
                request = strata_pb2.PushRequest(
                    batches=[strata_pb2.TableBatch(
                        table=table, keys=unique[positions].tolist(),
                        values=summed[positions].reshape(-1).tolist())],
                    client_id=self.client_id, sequence=sequence,
                    shard_map_version=self.shard_map_version)
                try:
                    duplicate &= self._shards[shard].call(
                        "Push", request, timeout).duplicate
                except FailedPreconditionError as e:
                    if e.shard_map_version is None:
                        raise
                    # Not applied: these keys go again by the newer map.
                    refused.append(positions)
                    refusing.append(shard)
                    newest = max(newest, e.shard_map_version)
            if not refused:
                return duplicate
            self.refresh_shard_map(newest, timeout, refusing)
            kept = np.concatenate(refused)
            unique, summed = unique[kept], summed[kept]
        raise self._too_many_reroutes("push")

    def shard_map(self, timeout: Optional[float] = None, shards=None):
        """(version, owners): the newest shard map the shards (indexes in
        `shards`, every one of the current map when None) serve, owners
        being the shard index of each of the 4096 buckets."""
        newest = self._newest_map(timeout, shards)
        return newest.version, np.array(newest.bucket_owners, dtype=np.int64)

    def _newest_map(self, timeout, shards, skip_unreachable=False):
        """The newest map that `shards` (indexes; every one when None)
        serve; with `skip_unreachable`, shards that do not answer are left
        out (None when none answers)."""
        newest = None
        for index in range(self.num_shards) if shards is None else shards:
            try:
                answer = self._shards[index].call(
                    "GetShardMap", strata_pb2.GetShardMapRequest(), timeout)
            except (UnavailableError, DeadlineExceededError):
                if skip_unreachable:
                    continue
                raise
            if newest is None or answer.version > newest.version:
                newest = answer
        return newest

    def refresh_shard_map(self, at_least_version: int = 0,
                          timeout: Optional[float] = None,
                          shards=None) -> int:
        """Fetches the newest map of the shards (indexes; every one when
        None or empty) and routes by it from now on; returns its version.
        After a refusal, asking only the shards that refused (they serve a
        map at least that new) keeps a shard that is down out of it."""
        return self._install_map(self._newest_map(timeout, shards or None),
                                 at_least_version)

    def _install_map(self, newest, at_least_version=0):
        """Routes by `newest` (a ShardMap answer) from now on when it is
        newer than the current map; returns the version routed by."""
        version = newest.version
        owners = np.array(newest.bucket_owners, dtype=np.int64)
        if version < at_least_version:
            raise FailedPreconditionError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"a shard refused a request for shard map version "
                f"{at_least_version}, but the newest map the shards asked "
                f"serve is version {version}")
        count = newest.num_shards
        # A grown cluster's map names every shard's address (stratactl
        # reshard writes them): the shards it adds are reached from there.
        if len(newest.shard_addresses) == count:
            for address in newest.shard_addresses[len(self._shards):]:
                self._connect(address)
        if owners.size != NUM_BUCKETS or owners.max() >= count:
            raise FailedPreconditionError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the cluster's shard map (version {version}) is malformed: "
                f"{owners.size} bucket owners for {count} shards")
        if count > len(self._shards):
            raise FailedPreconditionError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the cluster's shard map (version {version}) has {count} "
                f"shards, beyond the {len(self._shards)} addresses this "
                f"client knows, and names no addresses: give it every "
                f"shard's")
        if version > self.shard_map_version:
            self._map = (version, owners, count)
        return self.shard_map_version

    @property
    def shard_map_version(self) -> int:
        """The version of the shard map this client routes by."""
        return self._map[0]

    def _shards_named(self, endpoint):
        """Index of the shard whose address (or one of whose replicas) is
        `endpoint`, as a list; empty when unknown."""
        for index, address in enumerate(self.addresses):
            if endpoint is not None and endpoint in [
                    e.strip() for e in address.split("|")]:
                return [index]
        return []

    def _too_many_reroutes(self, what):
        return FailedPreconditionError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{what}: the shard map changed {_MAX_REROUTES} times while the "
            f"call was routed (now version {self.shard_map_version})")

    def close(self) -> None:
        for pool in self._shards + self._health:
            pool.close()

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
        owners = self._map[1][buckets_of(table, unique).astype(np.int64)]
        for shard in np.unique(owners):
            yield int(shard), np.flatnonzero(owners == shard)
