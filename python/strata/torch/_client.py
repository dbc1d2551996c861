"""The training-PS client of strata.torch: libstrata_tf_client.so's C ABI
(tensorflow/strata_tf_client.h) through ctypes.

PyTorch needs no op library: the C client is loaded with RTLD_LOCAL |
RTLD_DEEPBIND, so Debian's gRPC, protobuf and Abseil inside it bind to each
other and never to copies that torch (or anything else in the process)
exports, and only C types cross the boundary. ctypes releases the GIL for
the length of each call, so a pull on a prefetch thread overlaps the
training step.
"""

import ctypes
import json
import os
import pathlib
import threading
from typing import Optional, Sequence, Union

import grpc
import numpy as np

from .. import errors, training

LIBRARY_NAME = "libstrata_tf_client.so"
ABI_VERSION = 3
_PACKAGE = pathlib.Path(__file__).resolve().parents[1]



class _Options(ctypes.Structure):
    _fields_ = [("shards", ctypes.c_char_p),
                ("rpc_timeout_s", ctypes.c_double),
                ("retry_deadline_s", ctypes.c_double),
                ("tls_ca_file", ctypes.c_char_p),
                ("tls_client_cert_file", ctypes.c_char_p),
                ("tls_client_key_file", ctypes.c_char_p),
                ("auth_token_file", ctypes.c_char_p),
                ("wire_float16", ctypes.c_int)]


class _TableConfig(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dim", ctypes.c_uint32),
                ("seed", ctypes.c_uint64), ("optimizer", ctypes.c_int),
                ("learning_rate", ctypes.c_float),
                ("initial_accumulator", ctypes.c_float),
                ("epsilon", ctypes.c_float), ("beta1", ctypes.c_float),
                ("beta2", ctypes.c_float), ("ftrl_beta", ctypes.c_float),
                ("l1", ctypes.c_float), ("l2", ctypes.c_float),
                ("initializer", ctypes.c_int),
                ("init_value", ctypes.c_float), ("init_min", ctypes.c_float),
                ("init_max", ctypes.c_float), ("init_mean", ctypes.c_float),
                ("init_stddev", ctypes.c_float)]


def candidate_paths():
    """Where the client library is looked for, in order:
    $STRATA_CLIENT_LIBRARY; next to strata.tf in the installed package
    (pip install ./python with TensorFlow puts it there); the build
    directory recorded at install; $STRATA_BIN_DIR/../lib; ./build/lib; the
    checkout's build/lib."""
    paths = []
    if os.environ.get("STRATA_CLIENT_LIBRARY"):
        paths.append(pathlib.Path(os.environ["STRATA_CLIENT_LIBRARY"]))
    paths.append(_PACKAGE / "tf" / LIBRARY_NAME)
    try:
        recorded = json.loads((_PACKAGE / "tf" / "_checkout.json").read_text())
        paths.append(pathlib.Path(recorded["build_dir"]) / "lib" /
                     LIBRARY_NAME)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if os.environ.get("STRATA_BIN_DIR"):
        paths.append(pathlib.Path(os.environ["STRATA_BIN_DIR"]).parent /
                     "lib" / LIBRARY_NAME)
    paths.append(pathlib.Path.cwd() / "build" / "lib" / LIBRARY_NAME)
    paths.append(_PACKAGE.parents[1] / "build" / "lib" / LIBRARY_NAME)
    return paths


_library = None
_library_lock = threading.Lock()


def load_library():
    """The loaded client library (once per process). FileNotFoundError
    naming every place looked in; RuntimeError for another ABI version."""
    global _library
    with _library_lock:
        if _library is not None:
            return _library
        paths = candidate_paths()
        if os.environ.get("STRATA_CLIENT_LIBRARY"):
            paths = paths[:1]  # an explicit path is never silently replaced
        found = next((p for p in paths if p.is_file()), None)
        if found is None:
            raise FileNotFoundError(
                f"strata.torch: {LIBRARY_NAME} not found (looked in "
                f"{', '.join(str(p) for p in paths)}). Build it (cmake "
                "--build build --target strata_tf_client) and set "
                "STRATA_CLIENT_LIBRARY to its path.")
        lib = ctypes.CDLL(str(found), mode=os.RTLD_NOW | os.RTLD_LOCAL |
                          getattr(os, "RTLD_DEEPBIND", 0))
        _declare(lib)
        version = lib.strata_tf_abi_version()
        if version != ABI_VERSION:
            raise RuntimeError(
                f"strata.torch: {found} has C ABI version {version}, this "
                f"package wants {ABI_VERSION}: rebuild the library from the "
                "same checkout as the package")
        _library = lib
        return lib


def _declare(lib):
    handle = ctypes.c_void_p
    u64p = ctypes.POINTER(ctypes.c_uint64)
    f32p = ctypes.POINTER(ctypes.c_float)
    size = ctypes.c_size_t
    lib.strata_tf_abi_version.restype = ctypes.c_int
    lib.strata_tf_client_create.argtypes = [ctypes.POINTER(_Options),
                                            ctypes.POINTER(handle)]
    lib.strata_tf_client_destroy.argtypes = [handle]
    lib.strata_tf_client_destroy.restype = None
    lib.strata_tf_create_table.argtypes = [handle,
                                           ctypes.POINTER(_TableConfig)]
    lib.strata_tf_pull.argtypes = [handle, ctypes.c_char_p, u64p, size, size,
                                   f32p]
    lib.strata_tf_push.argtypes = [handle, ctypes.c_char_p, u64p, size, size,
                                   f32p]
    lib.strata_tf_push_async.argtypes = [handle, ctypes.c_char_p, u64p, size,
                                         size, f32p, ctypes.c_int]
    lib.strata_tf_wait_for_pushes.argtypes = [handle]
    lib.strata_tf_last_error_message.restype = ctypes.c_char_p
    for name in ("strata_tf_client_create", "strata_tf_create_table",
                 "strata_tf_pull", "strata_tf_push", "strata_tf_push_async",
                 "strata_tf_wait_for_pushes", "strata_tf_last_error_code"):
        getattr(lib, name).restype = ctypes.c_int


def _check(lib, code):
    """Raises the strata.errors class of a nonzero C ABI status."""
    if code == 0:
        return
    message = (lib.strata_tf_last_error_message() or b"").decode(
        "utf-8", "replace")
    status = next((s for s in grpc.StatusCode if s.value[0] == code),
                  grpc.StatusCode.UNKNOWN)
    raise errors.error_for(status, f"strata.torch: {message}")


def _bytes(text):
    return text.encode() if text else b""


def table_config(name, dim, optimizer=training.DEFAULT_OPTIMIZER,
                 learning_rate=training.DEFAULT_LEARNING_RATE,
                 optimizer_args=None,
                 initializer=training.DEFAULT_INITIALIZER,
                 initializer_args=None, seed=0):
    """The C struct of a table config; ValueError naming an unknown
    optimizer, initializer or argument. Arguments left None take the
    defaults that strata-worker and strata.tf.Embedding use."""
    if optimizer_args is None:
        optimizer_args = training.default_optimizer_args(optimizer)
    if initializer_args is None:
        initializer_args = training.default_initializer_args(initializer)
    training.check_table_options("strata.torch", optimizer, initializer,
                                 optimizer_args, initializer_args)
    if not isinstance(dim, int) or dim <= 0:
        raise ValueError(f"strata.torch: dim must be a positive int, got "
                         f"{dim!r}")
    config = _TableConfig(name=_bytes(name), dim=dim, seed=int(seed),
                          optimizer=training.OPTIMIZER_TYPES[optimizer],
                          learning_rate=float(learning_rate),
                          initializer=training.INITIALIZER_TYPES[initializer])
    for key, value in optimizer_args.items():
        setattr(config, key, float(value))
    for key, value in initializer_args.items():
        setattr(config, "init_" + key, float(value))
    return config


class Client:
    """A connection to the training shards, shared by the layers that use
    it. Thread-safe: pulls and pushes may run from any thread at once.

    Args:
      shards: "host:port" or a list of them, in shard-index order.
      rpc_timeout: deadline of each attempt, seconds.
      retry_deadline: how long a call retries shards that are unreachable
        (UNAVAILABLE, with backoff) before it raises UnavailableError
        naming the shard.
      tls_ca_file, tls_client_cert_file, tls_client_key_file,
        auth_token_file: as for strata-worker.
      wire_float16: rows and gradients travel as half floats.
    """

    def __init__(self, shards: Union[str, Sequence[str]],
                 rpc_timeout: float = 10.0, retry_deadline: float = 30.0,
                 tls_ca_file: str = "", tls_client_cert_file: str = "",
                 tls_client_key_file: str = "", auth_token_file: str = "",
                 wire_float16: bool = False):
        if not isinstance(shards, str):
            shards = ",".join(shards)
        self._lib = load_library()
        options = _Options(
            shards=shards.encode(), rpc_timeout_s=float(rpc_timeout),
            retry_deadline_s=float(retry_deadline),
            tls_ca_file=_bytes(tls_ca_file),
            tls_client_cert_file=_bytes(tls_client_cert_file),
            tls_client_key_file=_bytes(tls_client_key_file),
            auth_token_file=_bytes(auth_token_file),
            wire_float16=int(bool(wire_float16)))
        handle = ctypes.c_void_p()
        _check(self._lib, self._lib.strata_tf_client_create(
            ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self.shards = shards

    def create_table(self, name: str, dim: int, **config) -> None:
        """Creates `name` on every shard (see table_config for the
        arguments). A no-op when it exists with this config;
        AlreadyExistsError naming the fields when with another."""
        struct = table_config(name, dim, **config)
        _check(self._lib, self._lib.strata_tf_create_table(
            self._handle, ctypes.byref(struct)))

    def pull(self, table: str, keys: np.ndarray, dim: int,
             out: Optional[np.ndarray] = None) -> np.ndarray:
        """Rows of `keys` (1-D uint64) as float32 [len(keys), dim]; into
        `out` when given (C-contiguous float32 of that shape)."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if out is None:
            out = np.empty((keys.size, dim), dtype=np.float32)
        if keys.size:
            _check(self._lib, self._lib.strata_tf_pull(
                self._handle, table.encode(), _u64(keys), keys.size, dim,
                _f32(out)))
        return out

    def push(self, table: str, keys: np.ndarray, gradients: np.ndarray,
             max_pending: int = 0) -> None:
        """Applies gradients [len(keys), dim] to the rows of `keys` with
        the table's optimizer. max_pending 0: synchronous; N > 0: queued in
        the background (at most N of the table queued or running; the error
        of an earlier background push is raised by a later call)."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        gradients = np.ascontiguousarray(gradients, dtype=np.float32)
        if gradients.shape[0] != keys.size:
            raise ValueError(f"strata.torch: {gradients.shape[0]} gradient "
                             f"rows for {keys.size} keys")
        if not keys.size:
            return
        dim = gradients.shape[1]
        if max_pending > 0:
            code = self._lib.strata_tf_push_async(
                self._handle, table.encode(), _u64(keys), keys.size, dim,
                _f32(gradients), int(max_pending))
        else:
            code = self._lib.strata_tf_push(
                self._handle, table.encode(), _u64(keys), keys.size, dim,
                _f32(gradients))
        _check(self._lib, code)

    def wait_for_pushes(self) -> None:
        """Returns once every background push has been applied; raises the
        error of one that failed."""
        _check(self._lib, self._lib.strata_tf_wait_for_pushes(self._handle))

    def close(self) -> None:
        """Finishes the background pushes and releases the connection."""
        handle, self._handle = self._handle, None
        if handle:
            self._lib.strata_tf_client_destroy(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def _u64(array):
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))


def _f32(array):
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
