"""Domain errors of the service and the one function that maps them to gRPC status codes.

The runner and the scheduler raise these; the servicers never choose status codes themselves.
A full queue is RESOURCE_EXHAUSTED (as Triton answers when its queue policy rejects), so that
clients can tell "back off" (RESOURCE_EXHAUSTED) from "this server is going away" (UNAVAILABLE).
"""

from __future__ import annotations

import grpc

from service.kserve_codec import InvalidTensor
from service.search import BatchFull, InvalidInput


class ServiceError(Exception):
    """Base class of errors that carry their own gRPC status code."""

    code = grpc.StatusCode.INTERNAL


class UnknownModel(ServiceError):
    """A KServe v2 request named a model (or version) that this server does not serve."""

    code = grpc.StatusCode.NOT_FOUND


class QueueFull(ServiceError):
    """The bounded request queue is full: the client should retry later."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class ShuttingDown(ServiceError):
    """The server is draining and accepts no new work."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    """The request's deadline passed before its result was ready."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(ServiceError):
    """The client cancelled the request."""

    code = grpc.StatusCode.CANCELLED


class BatchFailed(ServiceError):
    """Inference failed for the batch this request was in (the server keeps serving)."""

    code = grpc.StatusCode.INTERNAL


class NotReady(ServiceError):
    """The model is not loaded or its worker is not running."""

    code = grpc.StatusCode.UNAVAILABLE


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message for any exception raised while serving a call."""
    if isinstance(exc, ServiceError):
        return exc.code, str(exc)
    if isinstance(exc, InvalidInput | InvalidTensor):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, BatchFull):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
