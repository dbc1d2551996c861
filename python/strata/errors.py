"""Errors of the Strata clients: one class per gRPC status code that callers
act on, all subclasses of StrataError (which carries the code and the
server's message)."""

import grpc


class StrataError(Exception):
    """A call failed. `code` is the grpc.StatusCode, `details` the message of
    the server (or of the client, for failures it detects itself) and
    `endpoint` the "host:port" that answered, when known. A shard's refusal
    of a request routed by another shard map has `shard_map_version`, the
    shard's current version (else None)."""

    def __init__(self, code, details, endpoint=None, shard_map_version=None):
        self.code = code
        self.details = details
        self.endpoint = endpoint
        self.shard_map_version = shard_map_version
        where = f" (from {endpoint})" if endpoint else ""
        super().__init__(f"{code.name}: {details}{where}")


class InvalidArgumentError(StrataError, ValueError):
    """INVALID_ARGUMENT: bad keys, dimensions or values; don't retry. Also a
    ValueError, like the client's own validation errors."""


class NotFoundError(StrataError):
    """NOT_FOUND: unknown table."""


class AlreadyExistsError(StrataError):
    """ALREADY_EXISTS: e.g. a table with the same name and another config."""


class FailedPreconditionError(StrataError):
    """FAILED_PRECONDITION: the cluster is not in a state for this call."""


class AbortedError(StrataError):
    """ABORTED: shard-map version conflict; re-route and retry."""


class OutOfRangeError(StrataError):
    """OUT_OF_RANGE."""


class UnavailableError(StrataError):
    """UNAVAILABLE: no endpoint answered before the deadline (down,
    restarting or overloaded). The client already retried with backoff."""


class DeadlineExceededError(StrataError):
    """DEADLINE_EXCEEDED: the call did not finish before its deadline."""


class ResourceExhaustedError(StrataError):
    """RESOURCE_EXHAUSTED: memory budget or message size exceeded."""


class PermissionDeniedError(StrataError):
    """PERMISSION_DENIED or UNAUTHENTICATED."""


class InternalError(StrataError):
    """INTERNAL, UNKNOWN, DATA_LOSS or an answer the client cannot parse."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDeniedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.DATA_LOSS: InternalError,
}


def error_for(code, details, endpoint=None):
    """The StrataError subclass instance for a grpc.StatusCode."""
    return _BY_CODE.get(code, StrataError)(code, details, endpoint)


# Trailing metadata of a refusal for another shard map (common/shard_map.h).
SHARD_MAP_VERSION_METADATA = "strata-shard-map-version"


def from_rpc_error(error, endpoint=None):
    """Converts a grpc.RpcError raised by a stub call."""
    converted = error_for(error.code(), error.details() or "", endpoint)
    trailing = getattr(error, "trailing_metadata", None)
    if error.code() == grpc.StatusCode.FAILED_PRECONDITION and trailing:
        for key, value in trailing() or ():
            if key == SHARD_MAP_VERSION_METADATA and str(value).isdigit():
                converted.shard_map_version = int(value)
    return converted
