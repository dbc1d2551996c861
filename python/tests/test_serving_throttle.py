"""The serving client's throttle: AdaptiveThrottle on a fake clock, and
ServingClient against an in-process gRPC server (a fake servicer at the gRPC
seam) that refuses every call for overload, as an overloaded strata-serving
does."""

import threading
import time
from concurrent import futures

import grpc
import pytest

import strata
from strata._concurrency_limit import AdaptiveConcurrencyLimit
from strata._proto import strata_pb2, strata_pb2_grpc
from strata._throttle import AdaptiveThrottle


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def sent_in_last_second(throttle, clock, offered, capacity, seconds):
    sent = 0
    for _ in range(seconds):
        accepted = sent = 0
        for _ in range(offered):
            clock.now += 1.0 / offered
            if not throttle.allow():
                continue
            sent += 1
            accept = accepted < capacity
            accepted += int(accept)
            throttle.record(accept)
    return sent


def test_nothing_is_refused_while_the_server_accepts_everything():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=1.1, clock=clock, seed=1)
    for _ in range(5000):
        assert throttle.allow()
        throttle.record(True)
        clock.now += 0.003
    assert throttle.refusal_probability() == 0.0


def test_calls_in_flight_do_not_count_until_answered():
    # A cold client's first calls all leave before any answer is back.
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=1.25, clock=clock, seed=1)
    for _ in range(200):
        assert throttle.allow()
        clock.now += 0.00005
    assert throttle.refusal_probability() == 0.0
    for _ in range(200):
        throttle.record(True)
    assert throttle.refusal_probability() == 0.0


def test_ten_times_overload_reaches_the_server_as_about_k_times_it():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, seed=1)
    sent = sent_in_last_second(throttle, clock, offered=1000, capacity=100,
                               seconds=30)
    assert 150 < sent < 300
    assert throttle.refusal_probability() == pytest.approx(0.8, abs=0.05)


def test_refusals_stop_once_the_overload_leaves_the_window():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, seed=1)
    sent_in_last_second(throttle, clock, 1000, 100, 20)
    assert throttle.refusal_probability() > 0.5
    clock.now += 11
    assert throttle.refusal_probability() == 0.0


def test_a_refused_start_does_not_shut_the_throttle():
    # Without the ceiling, the formula stayed at requests / (requests + 1)
    # and the throttle let about one call in a thousand through.
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, seed=1)
    for _ in range(100):
        if throttle.allow():
            throttle.record(False)
    assert throttle.refusal_probability() == pytest.approx(0.9)
    assert sent_in_last_second(throttle, clock, 1000, 1000, 5) >= 950


def test_reopens_within_two_and_a_half_windows_of_an_outage():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, seed=1)
    assert sent_in_last_second(throttle, clock, 1000, 0, 30) <= 110
    assert sent_in_last_second(throttle, clock, 1000, 1000, 25) >= 950


def test_a_ceiling_of_one_refuses_nearly_everything_of_a_dead_server():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, seed=1, max_refusal=1.0)
    assert sent_in_last_second(throttle, clock, 1000, 0, 30) <= 2
    assert throttle.refusal_probability() > 0.999


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="k must be >= 1"):
        AdaptiveThrottle(k=0.5)
    with pytest.raises(ValueError, match="window"):
        AdaptiveThrottle(window=0)
    with pytest.raises(ValueError, match="max_refusal"):
        AdaptiveThrottle(max_refusal=0)


class RefusingServing(strata_pb2_grpc.ServingServiceServicer):
    def __init__(self):
        self.calls = 0
        self.past_deadline = False

    def Lookup(self, request, context):
        self.calls += 1
        if self.past_deadline:
            # What a server whose transport fell behind its callers looks
            # like to them.
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                          "Deadline Exceeded")
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      "overloaded: 4 lookups wait already")


def serve(servicer, threads):
    """An in-process gRPC server of `servicer` on a free loopback port:
    (server, "127.0.0.1:port")."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads))
    strata_pb2_grpc.add_ServingServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def refusing_server():
    servicer = RefusingServing()
    server, address = serve(servicer, threads=2)
    yield servicer, address
    server.stop(None)


def calls_for_lookups(refusing_server, throttle_k, lookups=20):
    servicer, address = refusing_server
    with strata.ServingClient(address, timeout=0.05, initial_backoff=0.001,
                              max_backoff=0.002,
                              throttle_k=throttle_k) as client:
        for _ in range(lookups):
            # Refused until the deadline: retried, then reported.
            with pytest.raises(strata.errors.UnavailableError,
                               match="overload"):
                client.lookup("t", [1, 2, 3])
    return servicer.calls


def test_without_the_throttle_every_retry_reaches_the_server(refusing_server):
    assert calls_for_lookups(refusing_server, throttle_k=0) >= 100


def test_the_throttle_keeps_most_retries_off_the_server(refusing_server):
    servicer, _ = refusing_server
    calls = calls_for_lookups(refusing_server, throttle_k=2.0)
    # 20 lookups retried for 50 ms each make hundreds of attempts; nearly
    # all of them are refused by the client once the server refuses.
    assert 0 < calls < 60, calls


def test_answers_past_their_deadline_also_close_the_throttle(
        refusing_server):
    servicer, address = refusing_server
    servicer.past_deadline = True
    late = throttled = 0
    with strata.ServingClient(address, timeout=0.05, initial_backoff=0.001,
                              max_backoff=0.002, throttle_k=2.0) as client:
        for _ in range(200):
            try:
                client.lookup("t", [1, 2, 3])
            except strata.errors.StrataError as e:
                if "throttled by the client" in str(e):
                    throttled += 1
                else:
                    late += 1
    # Every call fails; after the first few the client keeps most of them
    # off the server.
    assert late + throttled == 200
    assert 0 < servicer.calls < 40, servicer.calls
    assert throttled >= 160, throttled


# The bound on calls in flight (adaptive_concurrency_limit).

def test_the_bound_admits_up_to_its_limit_then_refuses():
    limit = AdaptiveConcurrencyLimit(initial_limit=4)
    tickets = [limit.acquire() for _ in range(4)]
    assert all(t is not None for t in tickets)
    assert limit.acquire() is None
    limit.release(tickets[0], True)
    assert limit.acquire() is not None
    assert limit.acquire() is None


def test_refusals_of_one_window_lower_the_bound_once():
    limit = AdaptiveConcurrencyLimit(initial_limit=8, backoff=0.5)
    tickets = [limit.acquire() for _ in range(8)]
    for ticket in tickets:
        limit.release(ticket, False)
    assert limit.limit == 4
    later = limit.acquire()
    limit.release(later, False)
    assert limit.limit == 2


def test_the_bound_settles_near_what_the_server_holds():
    limit = AdaptiveConcurrencyLimit()
    capacity, at_server = 5, []
    accepted = refused = 0
    for _ in range(20000):
        while True:
            ticket = limit.acquire()
            if ticket is None:
                break
            if len(at_server) < capacity:
                at_server.append(ticket)
            else:
                limit.release(ticket, False)
                refused += 1
        if at_server:
            limit.release(at_server.pop(0), True)
            accepted += 1
    assert 3 <= limit.limit <= 2 * capacity
    assert refused < accepted / 5


class HoldingServicer(strata_pb2_grpc.ServingServiceServicer):
    """Holds every lookup until released, as a server whose queue is
    full does."""

    def __init__(self):
        self.held = 0
        self.condition = threading.Condition()
        self.released = False

    def Lookup(self, request, context):
        with self.condition:
            self.held += 1
            self.condition.notify_all()
            self.condition.wait_for(lambda: self.released, timeout=60)
        return strata_pb2.LookupResponse(
            dim=4, values=[1.0] * (4 * len(request.keys)))


def test_calls_past_the_bound_fail_in_the_client():
    servicer = HoldingServicer()
    server, address = serve(servicer, threads=32)
    results = []
    lock = threading.Lock()
    try:
        client = strata.ServingClient(address, timeout=30,
                                      adaptive_concurrency_limit=True)

        def call():
            try:
                rows = client.lookup("t", [1, 2, 3])
                outcome = ("answered", rows.shape)
            except strata.StrataError as e:
                outcome = ("failed", str(e))
            with lock:
                results.append(outcome)

        callers = [threading.Thread(target=call) for _ in range(20)]
        for caller in callers:
            caller.start()
        # The four past the bound of 16 end while the others are held.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(results) >= 4:
                    break
            time.sleep(0.005)
        with servicer.condition:
            assert servicer.condition.wait_for(lambda: servicer.held == 16,
                                               timeout=30)
            assert len(results) == 4, results
            servicer.released = True
            servicer.condition.notify_all()
        for caller in callers:
            caller.join(timeout=60)
        client.close()
    finally:
        server.stop(None)
    answered = [r for r in results if r[0] == "answered"]
    failed = [r for r in results if r[0] == "failed"]
    assert len(answered) == 16 and all(r[1] == (3, 4) for r in answered)
    assert len(failed) == 4
    assert all("limited by the client" in r[1] for r in failed), failed
    assert servicer.held == 16
