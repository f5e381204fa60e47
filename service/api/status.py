"""The one table from domain exceptions to gRPC status codes, and the message a client sees; and
the HTTP status of every gRPC code, for the HTTP/REST server (service/api/http/).

A full queue is RESOURCE_EXHAUSTED (as Triton answers when its queue policy rejects), so that
clients can tell "back off" (RESOURCE_EXHAUSTED) from "this server is going away" (UNAVAILABLE).
Over HTTP both are 503 (the message tells which); bad input 400, an unknown model 404, a deadline
504, a client gone before its answer 499 (nginx's "client closed request"), a bug 500.
"""

from __future__ import annotations

import grpc

from service.domain import errors

MAX_MESSAGE_CHARS = 1000  # longest status message sent (gRPC trailers are limited to a few KiB)

STATUS_CODES: dict[type[errors.ServiceError], grpc.StatusCode] = {
    errors.InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,  # InvalidTensor included
    errors.UnknownModel: grpc.StatusCode.NOT_FOUND,
    errors.RepositoryRefused: grpc.StatusCode.FAILED_PRECONDITION,
    errors.MemoryBudgetExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.BatchFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.QueueFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.ShuttingDown: grpc.StatusCode.UNAVAILABLE,
    errors.NotReady: grpc.StatusCode.UNAVAILABLE,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Cancelled: grpc.StatusCode.CANCELLED,
    errors.BatchFailed: grpc.StatusCode.INTERNAL,
    errors.BundleError: grpc.StatusCode.INTERNAL,
    errors.ProviderUnavailable: grpc.StatusCode.UNAVAILABLE,
}


HTTP_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.ABORTED: 409,
}


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text cut to `limit` characters (marked), so that echoed client input cannot grow a status."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message for any exception raised while serving a call.

    Messages of our own errors are written for clients; any other exception is a bug whose text may
    hold internals (paths, class names), so the client gets an error id and the log gets the rest.
    """
    if isinstance(exc, errors.ServiceError):
        for kind in type(exc).__mro__:  # the most specific entry of the table
            if kind in STATUS_CODES:
                return STATUS_CODES[kind], clip(str(exc))
    eid = errors.error_id()
    return grpc.StatusCode.INTERNAL, f"internal error (error id {eid}; details in the server log)"


def http_status_of(exc: BaseException) -> tuple[int, str, str]:
    """(HTTP status, the gRPC code's name for the metrics, message) of an exception: `status_of`'s row."""
    code, message = status_of(exc)
    return HTTP_CODES[code], code.name, message
