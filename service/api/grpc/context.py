"""What every gRPC adapter shares: a call's deadline, and a domain error's gRPC status."""

from __future__ import annotations

import time

import grpc
from grpc import aio

from service.api.status import status_of


def deadline_of(context: aio.ServicerContext) -> float | None:
    """The call's deadline as an absolute time.monotonic() value, None when the client set none."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def grpc_status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message of any exception (the table of service/api/status.py)."""
    code, message = status_of(exc)
    return grpc.StatusCode[code], message
