"""Validation of feature ids on the client, before any call."""

import numbers

import numpy as np

MAX_KEY = (1 << 64) - 1


def as_keys(keys, what="keys"):
    """A 1-D array-like of ids in [0, 2^64-1] -> 1-D numpy uint64 array.

    Accepts lists, tuples, ranges and other iterables of Python or numpy
    integers, and 1-D numpy arrays of an integer dtype (or object dtype
    holding integers). Raises ValueError for anything else: a scalar, a 2-D
    array, a float, bool or string id, a negative id, an id >= 2^64. Floats
    are refused even when integral, since float64 cannot hold every uint64.
    May return an empty array; callers decide what empty means.
    """
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"{what} must be 1-D, got shape {keys.shape}")
        kind = keys.dtype.kind
        if kind == "u":
            return keys.astype(np.uint64, copy=False)
        if kind == "i":
            if keys.size and keys.min() < 0:
                raise ValueError(f"{what} must be >= 0, got {keys.min()}")
            return keys.astype(np.uint64)
        if kind != "O":
            raise ValueError(f"{what} must be integers, got dtype {keys.dtype}")
        items = keys.tolist()
    elif isinstance(keys, (str, bytes, bytearray, dict)) or not _iterable(keys):
        raise ValueError(f"{what} must be a 1-D sequence of integer ids, not "
                         f"{type(keys).__name__}")
    else:
        items = list(keys)
    ids = []
    for i, k in enumerate(items):
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
            raise ValueError(f"{what}[{i}] = {k!r} is not an integer id")
        k = int(k)
        if not 0 <= k <= MAX_KEY:
            raise ValueError(f"{what}[{i}] = {k} is outside [0, 2^64-1]")
        ids.append(k)
    return np.array(ids, dtype=np.uint64)


def _iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True
