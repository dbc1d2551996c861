"""strata.torch.EmbeddingBag: torch.nn.EmbeddingBag with its rows on a
Strata training PS."""

import collections
import concurrent.futures
import threading
from typing import Optional, Sequence, Union

import numpy as np
import torch

from .. import training
from ._client import Client

MODES = ("sum", "mean", "max")
# Prefetched batches kept for their forward; more are dropped, oldest first.
_MAX_PREFETCHED = 4

_clients = {}
_clients_lock = threading.Lock()


def shared_client(shards, **connection) -> Client:
    """The process's Client of these shards and connection options (one per
    distinct set, so that the layers of a job share its connections and
    background-push queues)."""
    if not isinstance(shards, str):
        shards = ",".join(shards)
    key = (shards, tuple(sorted(connection.items())))
    with _clients_lock:
        if key not in _clients:
            _clients[key] = Client(shards, **connection)
        return _clients[key]


def wait_for_pushes() -> None:
    """Waits for every background push of every shared client; raises the
    error of one that failed."""
    with _clients_lock:
        clients = list(_clients.values())
    for client in clients:
        client.wait_for_pushes()


def as_keys(ids: torch.Tensor) -> np.ndarray:
    """int64 ids -> uint64 keys, bit for bit (a negative id is the key of
    its two's complement, as strata.tf takes uint64 keys)."""
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"strata.torch: ids must be int64 or int32, got "
                        f"{ids.dtype}")
    return ids.detach().to(torch.int64).cpu().contiguous().numpy().view(
        np.uint64)


class _PullPush(torch.autograd.Function):
    """rows = the pulled rows of the batch's distinct keys (forward); their
    gradient, already summed per key, is pushed in backward. `trigger`, an
    empty tensor that requires grad, makes autograd call backward."""

    @staticmethod
    def forward(ctx, trigger, rows, layer, keys):
        del trigger
        ctx.layer = layer
        ctx.keys = keys
        return rows.clone()

    @staticmethod
    def backward(ctx, grad_rows):
        ctx.layer._push(ctx.keys, grad_rows)
        return None, None, None, None


class EmbeddingBag(torch.nn.Module):
    """Bags of embedding rows, as torch.nn.EmbeddingBag computes them, whose
    rows live on a Strata training PS.

    forward(input, offsets=None, per_sample_weights=None) takes what
    torch.nn.EmbeddingBag takes: 1-D ids with `offsets` (the start of each
    bag; include_last_offset as torch's), or 2-D [bags, n] ids of fixed
    length; `per_sample_weights` with mode "sum". It pulls each distinct id
    of the batch once (ids are uint64 keys: int64 ids are taken bit for
    bit), pools them with torch.nn.functional.embedding_bag (sum, mean or
    max; an empty bag gives zeros) and returns [bags, dim]. backward pushes
    the gradient of every distinct row, summed over its occurrences within
    and across bags, and the table's optimizer on the shards applies it.
    The torch optimizer never sees the rows: the module has no parameters,
    and trains only through its pushes. Under torch.no_grad() (evaluation)
    nothing is pushed, and the lookup first waits for this layer's
    background pushes.

    Asynchronous pushes: with push_staleness N > 0 (the default 1, as
    strata-worker's --staleness), backward queues its push and returns, so
    the push of step t overlaps step t+1; a pull may then miss the updates
    of at most this process's last N steps. 0 pushes inside backward.
    wait_for_pushes() (of the module or of strata.torch) waits for them,
    and so does the process's normal exit.

    Pull-ahead: prefetch(next_input) pulls the next batch's rows on a
    background thread while the current step computes; the next forward
    whose ids are the same uses them instead of pulling again. The rows are
    then older by one more step; strata.torch.prefetch_ahead wraps a batch
    iterator to do this for every batch.

    With DistributedDataParallel, wrap the whole model: DDP allreduces the
    dense parameters' gradients, and each rank pushes the gradients of its
    own batch's rows (averaging, if wanted, is the loss's business, as for
    strata-worker's ranks).

    Args:
      table: PS table name. embedding_dim: its dimension.
      shards: "host:port" or a list, in shard-index order (or `client`).
      mode: "sum", "mean" (torch's default) or "max".
      optimizer, learning_rate, optimizer_args, initializer,
        initializer_args, seed: the table config, with the defaults of
        strata-worker and strata.tf.Embedding (Adagrad, learning rate 0.05,
        initial accumulator 0.1, truncated normal with stddev 0.01).
      create_table: create the table now (a no-op when it exists with the
        same config; AlreadyExistsError when with another).
      include_last_offset: as torch.nn.EmbeddingBag's.
      client: a strata.torch.Client to use instead of the shared one of
        `shards` and `connection`.
      connection: rpc_timeout, retry_deadline, tls_*, auth_token_file,
        wire_float16 (see strata.torch.Client).

    Example:
      bag = strata.torch.EmbeddingBag("items", 16, shards="127.0.0.1:50051",
                                      mode="sum")
      pooled = bag(ids, offsets)          # [bags, 16]
    """

    def __init__(self, table: str, embedding_dim: int,
                 shards: Union[str, Sequence[str], None] = None,
                 mode: str = "mean",
                 optimizer: str = training.DEFAULT_OPTIMIZER,
                 learning_rate: float = training.DEFAULT_LEARNING_RATE,
                 optimizer_args: Optional[dict] = None,
                 initializer: str = training.DEFAULT_INITIALIZER,
                 initializer_args: Optional[dict] = None, seed: int = 0,
                 create_table: bool = True, push_staleness: int = 1,
                 include_last_offset: bool = False,
                 client: Optional[Client] = None, **connection):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"strata.torch: mode {mode!r} is not one of "
                             f"{', '.join(MODES)}")
        if push_staleness < 0:
            raise ValueError(f"strata.torch: push_staleness must be >= 0, "
                             f"got {push_staleness}")
        if client is None:
            if shards is None:
                raise ValueError("strata.torch: give shards or client")
            client = shared_client(shards, **connection)
        self.table = table
        self.embedding_dim = int(embedding_dim)
        self.mode = mode
        self.push_staleness = int(push_staleness)
        self.include_last_offset = include_last_offset
        self.client = client
        if create_table:
            client.create_table(
                table, self.embedding_dim, optimizer=optimizer,
                learning_rate=learning_rate, optimizer_args=optimizer_args,
                initializer=initializer, initializer_args=initializer_args,
                seed=seed)
        self._prefetch_pool = None
        # (distinct keys, future of their rows) of the batches prefetched and
        # not yet trained, oldest first: prefetch_ahead asks for batch t+1
        # before batch t's forward.
        self._prefetched = collections.deque(maxlen=_MAX_PREFETCHED)
        # Forwards that used prefetched rows (for tests and tuning).
        self.prefetch_hits = 0

    def extra_repr(self):
        return (f"table={self.table!r}, embedding_dim={self.embedding_dim}, "
                f"mode={self.mode!r}, shards={self.client.shards!r}, "
                f"push_staleness={self.push_staleness}")

    def pull(self, ids) -> torch.Tensor:
        """The current rows of `ids` (any shape) as [*ids.shape, dim]; not
        differentiable. Waits for this layer's background pushes first."""
        ids = torch.as_tensor(ids)
        self.client.wait_for_pushes()
        rows = self.client.pull(self.table, as_keys(ids.reshape(-1)),
                                self.embedding_dim)
        return torch.from_numpy(rows).reshape(*ids.shape, self.embedding_dim)

    def prefetch(self, input) -> None:
        """Starts pulling the distinct rows of `input` (the next batch's
        ids) in the background; see "Pull-ahead"."""
        keys, _ = _distinct(as_keys(torch.as_tensor(input).reshape(-1)))
        if self._prefetch_pool is None:
            self._prefetch_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="strata-prefetch")
        future = self._prefetch_pool.submit(self.client.pull, self.table,
                                            keys, self.embedding_dim)
        self._prefetched.append((keys, future))

    def wait_for_pushes(self) -> None:
        """Waits until this layer's client has applied every background
        push; raises the error of one that failed."""
        self.client.wait_for_pushes()

    def forward(self, input, offsets=None, per_sample_weights=None):
        input = torch.as_tensor(input)
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("strata.torch: offsets must be None when "
                                 "input is 2-D (bags of equal length)")
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("strata.torch: 1-D input needs offsets")
        else:
            raise ValueError(f"strata.torch: input must be 1-D with offsets "
                             f"or 2-D, got shape {tuple(input.shape)}")
        if per_sample_weights is not None and self.mode != "sum":
            raise ValueError("strata.torch: per_sample_weights need "
                             f"mode='sum', not {self.mode!r}")
        keys, inverse = _distinct(as_keys(input.reshape(-1)))
        rows = torch.from_numpy(self._rows(keys))
        training_step = torch.is_grad_enabled()
        if training_step:
            trigger = torch.empty(0, requires_grad=True)
            rows = _PullPush.apply(trigger, rows, self, keys)
        index = torch.from_numpy(inverse).reshape(input.shape)
        return torch.nn.functional.embedding_bag(
            index, rows, offsets, mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset)

    def _rows(self, keys):
        """The rows of the distinct `keys`: prefetched when prefetch() was
        given these ids, else pulled now (after this layer's background
        pushes when nothing will be pushed)."""
        for i, (prefetched_keys, future) in enumerate(self._prefetched):
            if np.array_equal(prefetched_keys, keys):
                # Older entries were for batches that never came.
                for _ in range(i + 1):
                    self._prefetched.popleft()
                self.prefetch_hits += 1
                return future.result()
        if not torch.is_grad_enabled():
            self.client.wait_for_pushes()
        return self.client.pull(self.table, keys, self.embedding_dim)

    def _push(self, keys, grad_rows):
        gradients = grad_rows.detach().to(torch.float32).cpu().numpy()
        self.client.push(self.table, keys, gradients,
                         max_pending=self.push_staleness)


def _distinct(keys):
    """(sorted distinct keys, index of each key among them) of uint64
    keys."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, inverse.astype(np.int64).reshape(-1)


def prefetch_ahead(batches, prefetch):
    """Yields the batches of `batches`, calling prefetch(next_batch) before
    yielding each one, so that the pull of batch t+1 runs while batch t
    trains. `prefetch` usually calls EmbeddingBag.prefetch on the next
    batch's ids."""
    iterator = iter(batches)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for upcoming in iterator:
        prefetch(upcoming)
        yield current
        current = upcoming
    yield current
