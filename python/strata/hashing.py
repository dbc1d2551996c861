"""Placement of keys on training shards, bit for bit as common/hash.h does it:
bucket = Mix64(key ^ HashString(table)) % 4096, shard = bucket % num_shards."""

import numpy as np

NUM_BUCKETS = 4096
_MASK = (1 << 64) - 1


def mix64(x):
    """SplitMix64's finalizer of a Python int (taken mod 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def hash_string(text):
    """FNV-1a 64 over the UTF-8 bytes of `text` (str or bytes), then mix64."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return mix64(h)


def _mix64_array(x):
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def buckets_of(table, keys):
    """Bucket of each key (1-D uint64 array) of `table`, as uint64 array."""
    table_hash = np.uint64(hash_string(table))
    return _mix64_array(np.asarray(keys, dtype=np.uint64) ^ table_hash) % \
        np.uint64(NUM_BUCKETS)


def shards_of(table, keys, num_shards):
    """Index of the shard owning each key under the default shard map."""
    return (buckets_of(table, keys) % np.uint64(num_shards)).astype(np.int64)
