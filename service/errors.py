"""Domain errors of the service and the one function that maps them to gRPC status codes.

The runner and the scheduler raise these; the servicers never choose status codes themselves.
A full queue is RESOURCE_EXHAUSTED (as Triton answers when its queue policy rejects), so that
clients can tell "back off" (RESOURCE_EXHAUSTED) from "this server is going away" (UNAVAILABLE).
"""

from __future__ import annotations

import uuid

import grpc

from service.kserve_codec import InvalidTensor
from service.search import BatchFull, InvalidInput

MAX_MESSAGE_CHARS = 1000  # longest status message sent (gRPC trailers are limited to a few KiB)


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


def error_id() -> str:
    """A short random id that ties a client's status message to the server's log line."""
    return uuid.uuid4().hex[:12]


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text cut to `limit` characters (marked), so that echoed client input cannot grow a status."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message for any exception raised while serving a call.

    Messages of our own errors are written for clients; any other exception is a bug whose text may
    hold internals (paths, class names), so the client gets an error id and the log gets the rest.
    """
    if isinstance(exc, ServiceError):
        return exc.code, clip(str(exc))
    if isinstance(exc, InvalidInput | InvalidTensor):
        return grpc.StatusCode.INVALID_ARGUMENT, clip(str(exc))
    if isinstance(exc, BatchFull):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, clip(str(exc))
    return grpc.StatusCode.INTERNAL, f"internal error (error id {error_id()}; details in the server log)"
