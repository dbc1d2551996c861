"""Python clients of Strata, the parameter server for sparse recommendation
models: ServingClient (lookups on the serving PS) and ParameterServerClient
(training shards; for tests and tools)."""

from .errors import (AbortedError, AlreadyExistsError, DeadlineExceededError,
                     FailedPreconditionError, InternalError,
                     InvalidArgumentError, NotFoundError, OutOfRangeError,
                     PermissionDeniedError, ResourceExhaustedError,
                     StrataError, UnavailableError)
from .serving import ServingClient
from .training import ParameterServerClient

__version__ = "0.2.0"

__all__ = [
    "ServingClient", "ParameterServerClient", "StrataError",
    "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError",
    "UnavailableError", "DeadlineExceededError", "ResourceExhaustedError",
    "PermissionDeniedError", "InternalError",
]
