"""Client-side throttling of overloaded servers (the C++ clients'
common/adaptive_throttle.h, the adaptive throttling of Google's SRE book).

A server's refusal (RESOURCE_EXHAUSTED) is cheaper than an answer but not
free: ten times a server's capacity in refusals takes all of its CPU. Once
the server refuses, the client itself refuses a call with the probability
max(0, (requests - k * accepts) / (requests + 1)) over the last `window`
seconds, so the server sees about k times what it accepts. A call counts
once its outcome is known (refused here, or answered): calls in flight are
neither requests nor accepts, so the burst a cold client sends before its
first answer does not read as refusals.

The probability never exceeds `max_refusal` (0.9): refusals here count as
requests, so without a ceiling a server that refused everything for a
moment would leave the throttle refusing nearly every call for minutes.
With it a tenth of the calls still reach the server and their accepts
reopen the throttle; loads up to k / (1 - max_refusal) times what the
server accepts are throttled as before."""

import random
import threading
import time

_BUCKETS = 10


class AdaptiveThrottle:
    """Thread-safe. `k` >= 1: calls sent per call accepted before local
    refusals start; `clock` returns seconds (time.monotonic by default)."""

    def __init__(self, k=2.0, window=10.0, clock=time.monotonic, seed=None,
                 max_refusal=0.9):
        if k < 1:
            raise ValueError(f"throttle k must be >= 1, not {k!r}")
        if not 0 < max_refusal <= 1:
            raise ValueError(
                f"throttle max_refusal must be in (0, 1], not {max_refusal!r}")
        if window <= 0:
            raise ValueError(f"throttle window must be > 0 s, not {window!r}")
        self._k = float(k)
        self._max_refusal = float(max_refusal)
        self._width = float(window) / _BUCKETS
        self._clock = clock
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        # [bucket number, requests, accepts] per slot.
        self._buckets = [[-_BUCKETS - 1, 0, 0] for _ in range(_BUCKETS)]

    def _current(self):
        number = int(self._clock() // self._width)
        bucket = self._buckets[number % _BUCKETS]
        if bucket[0] != number:
            bucket[:] = [number, 0, 0]
        return bucket

    def _probability(self):
        newest = self._current()[0]
        requests = accepts = 0
        for number, sent, accepted in self._buckets:
            if newest - number < _BUCKETS:
                requests += sent
                accepts += accepted
        probability = (requests - self._k * accepts) / (requests + 1)
        return min(self._max_refusal, max(0.0, probability))

    def allow(self):
        """Whether to send the next call; counts it as a request when
        not."""
        with self._lock:
            probability = self._probability()
            if probability <= 0 or self._random.random() >= probability:
                return True
            self._current()[1] += 1
            return False

    def record(self, accepted):
        """The server's answer to a call allow() let through (a request,
        and an accept when `accepted`: unless it refused the call for
        overload or its deadline passed)."""
        with self._lock:
            bucket = self._current()
            bucket[1] += 1
            if accepted:
                bucket[2] += 1

    def refusal_probability(self):
        with self._lock:
            return self._probability()
