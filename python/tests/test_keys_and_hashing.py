"""Client-side pieces that need no cluster: key validation, placement hash,
errors, endpoint parsing."""

import grpc
import numpy as np
import pytest

import strata
from strata._keys import as_keys
from strata._rpc import parse_endpoints
from strata.errors import error_for
from strata.hashing import buckets_of, hash_string, mix64, shards_of

MAX = 2**64 - 1


def test_mix64_and_hash_string_match_the_pinned_cpp_values():
    # The same constants as tests/common/hash_test.cc.
    assert mix64(0) == 0xE220A8397B1DCDAF
    assert mix64(1) == 0x910A2DEC89025CC1
    assert mix64(12345) == 0x22118258A9D111A0
    assert mix64(MAX) == 0xE4D971771B652C20
    assert hash_string("") == 0xC3817C016BA4FF30
    assert hash_string("a") == 0x5F29C2AADD9B8527
    assert hash_string("user") == 0x25DB21AE0302BF5B
    assert hash_string("item_embedding") == 0x4A25E3DA8EB68A39
    assert hash_string(b"\xff") == mix64((0xCBF29CE484222325 ^ 0xFF) * 0x100000001B3 % 2**64)


def test_placement_matches_the_pinned_cpp_buckets():
    assert buckets_of("user", [0, 42]).tolist() == [2283, 2885]
    assert buckets_of("item_embedding", [1234567890123]).tolist() == [1547]
    assert shards_of("user", [0, 42], 4).tolist() == [3, 1]


def test_vectorized_placement_equals_scalar_definition():
    keys = np.array([0, 1, 2**32, 2**63, MAX, 987654321987654321], np.uint64)
    table = hash_string("t")
    expected = [mix64(int(k) ^ table) % 4096 for k in keys]
    assert buckets_of("t", keys).tolist() == expected


@pytest.mark.parametrize("keys", [
    [0, 1, MAX], (0, 1, MAX), np.array([0, 1, MAX], np.uint64),
    np.array([0, 1, MAX], dtype=object), [np.uint64(0), np.int32(1), MAX]])
def test_as_keys_accepts_integer_sequences_up_to_2_64_minus_1(keys):
    ids = as_keys(keys)
    assert ids.dtype == np.uint64 and ids.tolist() == [0, 1, MAX]


def test_as_keys_accepts_signed_arrays_ranges_and_empty():
    assert as_keys(np.arange(3, dtype=np.int64)).tolist() == [0, 1, 2]
    assert as_keys(range(2)).tolist() == [0, 1]
    assert as_keys([]).size == 0


@pytest.mark.parametrize("keys", [
    [-1], np.array([3, -2]), [1.5], [2.0], np.array([1.0]), [True], ["7"],
    [2**64], [None], 7, "17", np.array(5), np.zeros((2, 2), np.uint64),
    [[1, 2]]])
def test_as_keys_rejects_non_ids_with_value_error(keys):
    with pytest.raises(ValueError):
        as_keys(keys)


def test_errors_carry_code_and_message_and_map_by_code():
    e = error_for(grpc.StatusCode.NOT_FOUND, "unknown table 'x'", "h:1")
    assert isinstance(e, strata.NotFoundError) and isinstance(e, strata.StrataError)
    assert e.code == grpc.StatusCode.NOT_FOUND and e.details == "unknown table 'x'"
    assert "unknown table 'x'" in str(e) and e.endpoint == "h:1"
    assert isinstance(error_for(grpc.StatusCode.INVALID_ARGUMENT, ""), ValueError)
    assert isinstance(error_for(grpc.StatusCode.UNAVAILABLE, ""),
                      strata.UnavailableError)
    assert type(error_for(grpc.StatusCode.CANCELLED, "")) is strata.StrataError


def test_endpoints_are_host_port_strings():
    assert parse_endpoints("a:1") == ["a:1"]
    assert parse_endpoints(["a:1", "[::1]:2"]) == ["a:1", "[::1]:2"]
    for bad in ([], "", "a", ["a:1", "b"], ["a:x"], 5):
        with pytest.raises(ValueError):
            parse_endpoints(bad)


def test_client_validates_before_calling_a_server():
    # Nothing listens on this endpoint: the ValueErrors come before any call.
    with strata.ServingClient("127.0.0.1:1", timeout=0.5) as client:
        with pytest.raises(ValueError):
            client.lookup("t", [-1])
        with pytest.raises(ValueError):
            client.lookup("t", [0.5])
        with pytest.raises(strata.InvalidArgumentError):
            client.lookup("t", [])
    with pytest.raises(ValueError):
        strata.ServingClient("127.0.0.1:1", timeout=0)


def test_calls_start_round_robin_over_the_endpoints():
    with strata.ServingClient(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]) as c:
        starts = [c._pool._next_start() for _ in range(7)]
    assert starts == [0, 1, 2, 0, 1, 2, 0]
