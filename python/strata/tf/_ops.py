"""Loading libstrata_tf_ops.so and the functions over its ops."""

import os
import pathlib
import sys
import threading

import tensorflow as tf

from strata import training
from strata.tf import _build

LIBRARY_NAME = "libstrata_tf_ops.so"
_REPO_BUILD_LIB = pathlib.Path(__file__).resolve().parents[3] / "build" / "lib"
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent

_lock = threading.Lock()
_module = None

OPTIMIZERS = tuple(training.OPTIMIZER_TYPES)
INITIALIZERS = tuple(training.INITIALIZER_TYPES)


def candidate_paths():
    """Where load_ops() looks for the op library, in order."""
    paths = []
    if os.environ.get("STRATA_TF_OPS_LIBRARY"):
        paths.append(pathlib.Path(os.environ["STRATA_TF_OPS_LIBRARY"]))
    paths.append(_PACKAGE_DIR / LIBRARY_NAME)
    if os.environ.get("STRATA_BIN_DIR"):
        paths.append(pathlib.Path(os.environ["STRATA_BIN_DIR"]).parent /
                     "lib" / LIBRARY_NAME)
    paths.append(pathlib.Path.cwd() / "build" / "lib" / LIBRARY_NAME)
    paths.append(_REPO_BUILD_LIB / LIBRARY_NAME)
    return paths


def library_path():
    """The op library load_ops() loads; FileNotFoundError if none is found.

    STRATA_TF_OPS_LIBRARY, when set, is the only candidate: a wrong path is
    an error, never a silent fallback to another build.
    """
    paths = candidate_paths()
    if os.environ.get("STRATA_TF_OPS_LIBRARY"):
        paths = paths[:1]
    for path in paths:
        if path.is_file():
            return path
    if not os.environ.get("STRATA_TF_OPS_LIBRARY"):
        built = build_from_checkout()
        if built is not None:
            return built
    raise FileNotFoundError(
        f"strata.tf: {LIBRARY_NAME} not found (looked in "
        f"{', '.join(str(p) for p in paths)}). Build it (make -C build "
        "strata_tf_ops, configured with a Python that has tensorflow: "
        "-DSTRATA_TF_PYTHON=...) and set STRATA_TF_OPS_LIBRARY to its path.")


def build_from_checkout():
    """The op library for this TensorFlow, built from the checkout strata was
    installed from (recorded at install) and copied into the package; None
    when no checkout was recorded or it is gone.

    `pip install ./python tensorflow-cpu` builds strata before TensorFlow is
    installed, so the library is made here, once: the recorded build
    directory's library is used when it was built for this TensorFlow,
    else the build directory is configured for this Python and the library
    built (minutes the first time).
    """
    checkout = _build.read_checkout(_PACKAGE_DIR)
    if checkout is None:
        return None
    repo, build_dir = checkout
    lib = build_dir / "lib"
    if _build.built_for(lib / LIBRARY_NAME) != tf.__version__:
        print(f"strata.tf: building the op library for TensorFlow "
              f"{tf.__version__} from {repo} in {build_dir}, once (a first "
              "build takes minutes)", file=sys.stderr, flush=True)
        try:
            lib = _build.build(repo, build_dir, sys.executable)
        except (OSError, RuntimeError) as e:
            raise ImportError(f"strata.tf: could not build the op library: "
                              f"{e}") from e
    if os.access(_PACKAGE_DIR, os.W_OK):
        _build.copy_libraries(lib, _PACKAGE_DIR)
        return _PACKAGE_DIR / LIBRARY_NAME
    return lib / LIBRARY_NAME


def load_ops():
    """The loaded op module (tf.load_op_library), loaded once per process.

    The op library loads libstrata_tf_client.so from its own directory (or
    STRATA_TF_CLIENT_LIBRARY) when the first Strata op runs.
    """
    global _module
    with _lock:
        if _module is None:
            path = library_path()
            built_for = _build.built_for(path)
            if (built_for not in (None, tf.__version__) and
                    not os.environ.get("STRATA_TF_OPS_LIBRARY")):
                # Built for another TensorFlow (upgraded since, or an old
                # build found first): build for this one when the checkout
                # strata was installed from is still there.
                path = build_from_checkout() or path
                built_for = _build.built_for(path)
            if built_for is not None and built_for != tf.__version__:
                raise ImportError(
                    f"strata.tf: {path} was built for TensorFlow {built_for}, "
                    f"but this Python has TensorFlow {tf.__version__}: "
                    "rebuild it against this one (pip install ./python, or "
                    "cmake -DSTRATA_TF_PYTHON=<this python> and make "
                    "strata_tf_ops)")
            try:
                module = tf.load_op_library(str(path))
            except tf.errors.NotFoundError as e:
                raise ImportError(
                    f"strata.tf: cannot load {path} (built for TensorFlow "
                    f"{built_for or 'unknown'}, this is {tf.__version__}): "
                    f"{e}") from e
            # Gradients are the Keras layer's business (embedding_lookup);
            # the raw ops are not differentiable.
            for op in ("StrataLookup", "StrataPush", "StrataCreateTable",
                       "StrataServingLookup"):
                tf.no_gradient(op)
            _module = module
        return _module


def connection_attrs(shards, rpc_timeout=10.0, retry_deadline=30.0,
                     tls_ca_file="", tls_client_cert_file="",
                     tls_client_key_file="", auth_token_file="",
                     wire_float16=False):
    """The connection attributes of every Strata op.

    shards: "host:port" or a list of them, in shard-index order.
    rpc_timeout: deadline of each attempt of each call, in seconds.
    retry_deadline: how long shards answering UNAVAILABLE are retried before
      the op fails with UNAVAILABLE or DEADLINE_EXCEEDED.
    TLS and token files as strata-worker's --tls_* / --auth_token_file.
    wire_float16: rows and gradients travel to and from the training PS as
      half floats (half the bytes, values rounded to the nearest half; the
      shards keep and update float32 rows); strata-bench --encoding=float16
      measures the same path. Ignored by the serving PS.
    """
    if isinstance(shards, (list, tuple)):
        shards = ",".join(shards)
    if not shards:
        raise ValueError("strata.tf: no shard addresses given")
    return {"shards": shards, "rpc_timeout_s": float(rpc_timeout),
            "retry_deadline_s": float(retry_deadline),
            "tls_ca_file": tls_ca_file or "",
            "tls_client_cert_file": tls_client_cert_file or "",
            "tls_client_key_file": tls_client_key_file or "",
            "auth_token_file": auth_token_file or "",
            "wire_float16": bool(wire_float16)}


def table_attrs(optimizer="adagrad", learning_rate=0.0, optimizer_args=None,
                initializer="zeros", initializer_args=None, seed=0):
    """The StrataCreateTable attributes of a table config; numbers left 0
    take the server's defaults. optimizer_args: initial_accumulator,
    epsilon, beta1, beta2, ftrl_beta, l1, l2; initializer_args: value, min,
    max, mean, stddev."""
    training.check_table_options("strata.tf", optimizer, initializer,
                                 optimizer_args, initializer_args)
    attrs = {"optimizer": optimizer, "learning_rate": float(learning_rate),
             "initializer": initializer, "seed": int(seed)}
    for name, value in (optimizer_args or {}).items():
        attrs[name] = float(value)
    for name, value in (initializer_args or {}).items():
        attrs["init_" + name] = float(value)
    return attrs


def as_ids(ids):
    """int64 ids; uint64 keys are reinterpreted bit for bit."""
    ids = tf.convert_to_tensor(ids)
    if ids.dtype == tf.uint64:
        return tf.bitcast(ids, tf.int64)
    if not ids.dtype.is_integer:
        raise TypeError(f"strata.tf: ids must be integers, got {ids.dtype}")
    return tf.cast(ids, tf.int64)


def create_table(table, dim, shards, optimizer="adagrad", learning_rate=0.0,
                 optimizer_args=None, initializer="zeros",
                 initializer_args=None, seed=0, **connection):
    """Creates `table` on every shard (eagerly, even when called while a
    tf.function is traced). A no-op when it exists with this config;
    tf.errors.AlreadyExistsError when it exists with another."""
    attrs = table_attrs(optimizer, learning_rate, optimizer_args,
                        initializer, initializer_args, seed)
    attrs.update(connection_attrs(shards, **connection))
    with tf.init_scope():
        load_ops().strata_create_table(table=table, dim=int(dim), **attrs)


def lookup(ids, table, dim, shards, wait_for_pushes=False, **connection):
    """Rows of `ids` (any shape) as float32 of shape ids.shape + [dim].
    Not differentiable: see embedding_lookup. With `wait_for_pushes`, first
    waits for every background push of the connection (push with
    max_pending_pushes > 0) and raises the error of one that failed."""
    return load_ops().strata_lookup(as_ids(ids), table=table, dim=int(dim),
                                    wait_for_pushes=bool(wait_for_pushes),
                                    **connection_attrs(shards, **connection))


def wait_for_pushes(shards, **connection):
    """Waits until every background push made through this connection
    (shards and connection options, as given to the ops) has been applied by
    the PS; raises the error of one that failed."""
    with tf.init_scope():
        lookup(tf.zeros([0], tf.int64), table="-", dim=1, shards=shards,
               wait_for_pushes=True, **connection)


def serving_lookup(ids, table, dim, serving, **connection):
    """Rows of `ids` (any shape) from the serving PS: `serving` is
    "host:port" or a list of strata-serving replicas (tried round-robin).
    float32 of shape ids.shape + [dim]; ids it holds no row for read as
    zeros. Not differentiable. The op an exported model serves with."""
    return load_ops().strata_serving_lookup(
        as_ids(ids), table=table, dim=int(dim),
        **connection_attrs(serving, **connection))


def push(ids, gradients, table, dim, shards, max_pending_pushes=0,
         **connection):
    """Pushes `gradients` (ids.shape + [dim]) of `ids`, summed per distinct
    id; the PS applies the table's optimizer. Returns a float scalar 0.0
    that is computed once the push succeeded, or, with max_pending_pushes N
    > 0, once it is queued on a background thread (at most N of the table
    queued or running; a failed one fails the next push or
    wait_for_pushes)."""
    return load_ops().strata_push(as_ids(ids), gradients, table=table,
                                  dim=int(dim),
                                  max_pending_pushes=int(max_pending_pushes),
                                  **connection_attrs(shards, **connection))


def embedding_lookup(ids, push_trigger, table, dim, shards,
                     max_pending_pushes=0, wait_for_pushes=False,
                     **connection):
    """lookup() whose gradient is pushed to the PS.

    The rows are not TensorFlow variables, so a tape would never
    differentiate through them by itself: the result is recorded as a
    function of `push_trigger` too, a float scalar read of a trainable
    variable. When the gradient with respect to that variable is computed
    (tape.gradient(loss, [..., variable])), the gradient with respect to the
    rows is pushed (summed per distinct id) and the variable's gradient is
    zero, computed by the push itself. Each computation of that gradient
    pushes once. `max_pending_pushes` and `wait_for_pushes` are those of
    push() and lookup().
    """
    attrs = connection_attrs(shards, **connection)
    ops = load_ops()
    ids = as_ids(ids)
    dim = int(dim)

    @tf.custom_gradient
    def lookup_pushing_gradients(ids, trigger):
        values = ops.strata_lookup(ids, table=table, dim=dim,
                                   wait_for_pushes=bool(wait_for_pushes),
                                   **attrs)

        def grad(upstream):
            upstream = tf.convert_to_tensor(upstream, dtype=tf.float32)
            # `done` (0.0) is the trigger's gradient: reading it needs the
            # push, so no graph optimizer drops the push as unused.
            done = ops.strata_push(
                ids, upstream, table=table, dim=dim,
                max_pending_pushes=int(max_pending_pushes), **attrs)
            return None, tf.cast(tf.reshape(done, tf.shape(trigger)),
                                 trigger.dtype)

        return values, grad

    return lookup_pushing_gradients(ids, push_trigger)
