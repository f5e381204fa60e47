"""The one table from domain exceptions to status codes: the gRPC code (by name) and the HTTP status of every
error, and the message a client sees.

A full queue is RESOURCE_EXHAUSTED (as Triton answers when its queue policy rejects), so that clients can tell
"back off" (RESOURCE_EXHAUSTED) from "this server is going away" (UNAVAILABLE). Over HTTP both are 503 (the
message tells which); bad input 400, an unknown model 404, a deadline 504, a client gone before its answer 499
(nginx's "client closed request"), a bug 500.
"""

from __future__ import annotations

from service.domain import errors

MAX_MESSAGE_CHARS = 1000  # longest status message sent (gRPC trailers are limited to a few KiB)
INTERNAL = "INTERNAL"

CODES: dict[type[errors.ServiceError], str] = {  # gRPC status code names
    errors.InvalidInput: "INVALID_ARGUMENT",  # InvalidTensor included
    errors.LanguageUndetermined: "INVALID_ARGUMENT",  # source_language "auto" found no language to use
    errors.UnknownModel: "NOT_FOUND",
    errors.RepositoryRefused: "FAILED_PRECONDITION",
    errors.MemoryBudgetExceeded: "RESOURCE_EXHAUSTED",
    errors.BatchFull: "RESOURCE_EXHAUSTED",
    errors.QueueFull: "RESOURCE_EXHAUSTED",
    errors.ShuttingDown: "UNAVAILABLE",
    errors.NotReady: "UNAVAILABLE",
    errors.DeadlineExceeded: "DEADLINE_EXCEEDED",
    errors.Cancelled: "CANCELLED",
    errors.BatchFailed: INTERNAL,
    errors.BundleError: INTERNAL,
    errors.ProviderUnavailable: "UNAVAILABLE",
}

HTTP_STATUSES: dict[str, int] = {  # gRPC status code name -> HTTP status
    "OK": 200, "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 503, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504,
    "CANCELLED": 499, "UNIMPLEMENTED": 501, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, INTERNAL: 500,
    "UNKNOWN": 500, "DATA_LOSS": 500, "ABORTED": 409,
}


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text cut to `limit` characters (marked), so that echoed client input cannot grow a status."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def status_of(exc: BaseException) -> tuple[str, str]:
    """The gRPC status code's name and the message for any exception raised while serving a call.

    Messages of our own errors are written for clients; any other exception is a bug whose text may hold
    internals (paths, class names), so the client gets an error id and the log gets the rest.
    """
    if isinstance(exc, errors.ServiceError):
        for kind in type(exc).__mro__:  # the most specific entry of the table
            if kind in CODES:
                return CODES[kind], clip(str(exc))
    return INTERNAL, f"internal error (error id {errors.error_id()}; details in the server log)"


def http_status_of(exc: BaseException) -> tuple[int, str, str]:
    """(HTTP status, the gRPC code's name for the metrics, message) of an exception: `status_of`'s row."""
    code, message = status_of(exc)
    return HTTP_STATUSES[code], code, message
