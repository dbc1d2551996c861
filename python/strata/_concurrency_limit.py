"""A client's adaptive bound on its calls in flight (the Python side of
common/adaptive_concurrency_limit.h): +1/limit per accepted answer while at
least half of the bound is in use, x`backoff` on a refusal for overload or a
late answer, once for the calls already in flight. A call past the bound
fails in the client, at no cost to the servers, which then refuse few calls
instead of about as many as they serve behind the throttle alone."""

import threading


class AdaptiveConcurrencyLimit:
    """Thread-safe. acquire() returns a ticket, or None when the bound is
    reached; release(ticket, accepted) ends that call."""

    def __init__(self, initial_limit=16.0, min_limit=1.0, max_limit=1024.0,
                 backoff=0.75):
        if min_limit < 1 or max_limit < min_limit:
            raise ValueError("need 1 <= min_limit <= max_limit")
        if not 0 < backoff < 1:
            raise ValueError(f"backoff must be in (0, 1), not {backoff!r}")
        self._min = float(min_limit)
        self._max = float(max_limit)
        self._backoff = float(backoff)
        self._limit = min(self._max, max(self._min, float(initial_limit)))
        self._in_flight = 0
        self._next_ticket = 0
        # Refusals of calls sent before the last decrease do not decrease
        # the bound again.
        self._first_ticket_to_decrease = 0
        self._lock = threading.Lock()

    def acquire(self):
        """(ticket number, busy) for a call that may start now, or None.
        busy: at least half the bound was in flight with it, so its
        acceptance is evidence that the bound may grow."""
        with self._lock:
            if self._in_flight + 1 > self._limit:
                return None
            self._in_flight += 1
            ticket = (self._next_ticket, 2 * self._in_flight >= self._limit)
            self._next_ticket += 1
            return ticket

    def release(self, ticket, accepted):
        """Ends the call of `ticket`. `accepted`: whether the server
        accepted it (not a refusal for overload, not late); None when the
        call got no answer to learn from (the caller's own exception)."""
        number, busy = ticket
        with self._lock:
            self._in_flight -= 1
            if accepted is None:
                return
            if accepted:
                if busy:
                    self._limit = min(self._max, self._limit + 1 / self._limit)
                return
            if number < self._first_ticket_to_decrease:
                return
            self._limit = max(self._min, self._limit * self._backoff)
            self._first_ticket_to_decrease = self._next_ticket

    @property
    def limit(self):
        with self._lock:
            return self._limit

    @property
    def in_flight(self):
        with self._lock:
            return self._in_flight
