"""Channels, deadlines and retries shared by the clients."""

import itertools
import random
import threading
import time

import grpc

from .errors import UnavailableError, error_for, from_rpc_error

_CHANNEL_OPTIONS = [
    # Lookups of large batches exceed gRPC's default 4 MiB receive limit.
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # A channel that failed to connect waits this long before trying again
    # and fails calls meanwhile; gRPC's default grows to 120 s, longer than
    # any deadline here, so a restarted server would be missed.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


# What a replica of a replicated shard that is not its primary answers
# (FAILED_PRECONDITION): "...; the primary is host:port (replica r1, ...)".
_PRIMARY_REDIRECT = "; the primary is "
# Answers the throttle counts as not accepted (common/adaptive_throttle.h's
# AcceptedByServer): a refusal for overload, and a call whose deadline
# passed, which is what an overloaded server's backlog looks like.
_NOT_ACCEPTED = (grpc.StatusCode.RESOURCE_EXHAUSTED,
                 grpc.StatusCode.DEADLINE_EXCEEDED)


def redirected_primary(details):
    """The primary's address a follower's refusal names, or None."""
    at = (details or "").find(_PRIMARY_REDIRECT)
    if at < 0:
        return None
    rest = details[at + len(_PRIMARY_REDIRECT):]
    return rest.split(" ", 1)[0] or None


def parse_endpoints(endpoints):
    """"host:port" (a replicated shard: its replicas joined by "|") or a
    non-empty list of them -> list of str."""
    if isinstance(endpoints, str):
        endpoints = endpoints.split("|")
    try:
        result = [str(e).strip() for e in endpoints]
    except TypeError:
        raise ValueError(f"endpoints must be 'host:port' or a list of them, "
                         f"not {endpoints!r}") from None
    if not result or not all(result):
        raise ValueError(f"endpoints must be non-empty 'host:port' strings: "
                         f"{endpoints!r}")
    for e in result:
        host, sep, port = e.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"endpoint {e!r} is not 'host:port'")
    return result


class _RefusedLocally(grpc.RpcError):
    """An attempt the client refused itself (its throttle, or its bound on
    calls in flight): answered like the server's RESOURCE_EXHAUSTED,
    without a call."""

    def __init__(self, details):
        super().__init__()
        self._details = details

    def code(self):
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self):
        return self._details


class RetryPolicy:
    """Every call has a deadline (`timeout` seconds, retries included).
    UNAVAILABLE and RESOURCE_EXHAUSTED (overloaded) answers are retried on
    the next endpoint at once, and after
    each full round over the endpoints with an exponential, jittered backoff
    starting at `initial_backoff` and capped at `max_backoff` seconds, until
    the deadline. Other errors are raised at once."""

    def __init__(self, timeout=5.0, initial_backoff=0.05, max_backoff=1.0,
                 backoff_multiplier=2.0):
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, not {timeout!r}")
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        if backoff_multiplier < 1:
            raise ValueError("backoff_multiplier must be >= 1")
        self.timeout = float(timeout)
        self.initial_backoff = float(initial_backoff)
        self.max_backoff = float(max_backoff)
        self.backoff_multiplier = float(backoff_multiplier)


class EndpointPool:
    """One channel per endpoint; calls go round-robin over them, or, for the
    replicas of a replicated shard (`follow_primary`), to the replica that
    last answered, moving to the one a follower's redirect names. Thread-safe:
    gRPC channels are, and the counters are locked."""

    def __init__(self, endpoints, policy, stub_class, follow_primary=False,
                 throttle=None, limit=None):
        self.endpoints = parse_endpoints(endpoints)
        self.policy = policy
        # An AdaptiveThrottle (_throttle.py) and an AdaptiveConcurrencyLimit
        # (_concurrency_limit.py), each or both None: an attempt either
        # refuses ends the call here, without a call to a server and
        # without retry.
        self._throttle = throttle
        self._limit = limit
        self._channels = [grpc.insecure_channel(e, options=_CHANNEL_OPTIONS)
                          for e in self.endpoints]
        self._stubs = [stub_class(c) for c in self._channels]
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._follow_primary = follow_primary
        self._primary = 0

    def close(self):
        for channel in self._channels:
            channel.close()

    def _next_start(self):
        with self._lock:
            if self._follow_primary:
                return self._primary
            return next(self._counter) % len(self.endpoints)

    def _note_primary(self, index):
        if self._follow_primary:
            with self._lock:
                self._primary = index

    def call(self, method, request, timeout=None, give_up=None):
        """Calls stub.`method`(request) under the retry policy and returns the
        response. Raises a StrataError subclass. `give_up(elapsed)`, when
        given, is asked after each UNAVAILABLE answer (elapsed: seconds
        since the call began); True stops the retries, and the call raises
        UnavailableError at once."""
        policy = self.policy
        budget = policy.timeout if timeout is None else float(timeout)
        start_time = time.monotonic()
        deadline = start_time + budget
        backoff = policy.initial_backoff
        start = self._next_start()
        n = len(self.endpoints)
        last_unavailable = None
        for attempt in itertools.count():
            index = (start + attempt) % n
            endpoint = self.endpoints[index]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ticket = None
            # The answer as the throttle and the bound count it; None
            # while there is none (another exception ends the attempt).
            accepted = None
            try:
                if self._throttle is not None and not self._throttle.allow():
                    raise _RefusedLocally(
                        "throttled by the client: the servers refuse calls "
                        "for overload (throttle_k)")
                if self._limit is not None:
                    ticket = self._limit.acquire()
                    if ticket is None:
                        raise _RefusedLocally(
                            f"limited by the client: {self._limit.in_flight} "
                            f"calls of this client are in flight, its bound "
                            f"while the servers refuse calls for overload "
                            f"(adaptive_concurrency_limit)")
                response = getattr(self._stubs[index], method)(
                    request, timeout=remaining)
                accepted = True
                if self._throttle is not None:
                    self._throttle.record(True)
                self._note_primary(index)
                return response
            except grpc.RpcError as e:
                code = e.code()
                if isinstance(e, _RefusedLocally):
                    # Ends the call: retrying would only draw again until
                    # one draw let it through.
                    last_unavailable = (e, endpoint)
                    break
                accepted = code not in _NOT_ACCEPTED
                if self._throttle is not None:
                    self._throttle.record(accepted)
                primary = (redirected_primary(e.details())
                           if code == grpc.StatusCode.FAILED_PRECONDITION
                           else None)
                if primary is not None and primary in self.endpoints:
                    # A follower: the next attempt goes to the primary it
                    # names (a failover: retried like UNAVAILABLE).
                    self._note_primary(self.endpoints.index(primary))
                    start = self.endpoints.index(primary) - attempt - 1
                    last_unavailable = (e, endpoint)
                elif code in (grpc.StatusCode.UNAVAILABLE,
                              grpc.StatusCode.RESOURCE_EXHAUSTED):
                    # Down or overloaded: retried with backoff.
                    last_unavailable = (e, endpoint)
                    if (code == grpc.StatusCode.UNAVAILABLE
                            and give_up is not None
                            and give_up(time.monotonic() - start_time)):
                        break
                elif (code == grpc.StatusCode.DEADLINE_EXCEEDED
                      and last_unavailable is not None):
                    break  # The deadline ran out while retrying.
                else:
                    raise from_rpc_error(e, endpoint) from None
            finally:
                if ticket is not None:
                    self._limit.release(ticket, accepted)
            if (attempt + 1) % n == 0:
                pause = min(backoff * random.uniform(0.5, 1.0),
                            deadline - time.monotonic())
                if pause > 0:
                    time.sleep(pause)
                backoff = min(backoff * policy.backoff_multiplier,
                              policy.max_backoff)
        if last_unavailable is None:
            raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"{method}: no attempt within {budget:.3g}s")
        error, endpoint = last_unavailable
        elapsed = time.monotonic() - start_time
        raise UnavailableError(
            grpc.StatusCode.UNAVAILABLE,
            f"{method}: {error.details() or 'unavailable'} (retried "
            f"{', '.join(self.endpoints)} for {elapsed:.2f}s)", endpoint)
