"""The error-mapping and metrics layer around every RPC of the server (a grpc.aio interceptor).

Handlers raise domain exceptions; this layer turns them into gRPC statuses with the one table of
service/api/status.py and records `metrics.observe_request(method, code, seconds, "grpc", model, version)`
once per call, for every service (translator, KServe v2, ModelMesh, health, reflection): model and version are
what the repository resolved while the call ran (`metrics.start_request` / `served_by`; a stream's requests
run in tasks that share its labels, the last one resolved stands). A status a handler set itself
(`context.abort`, or `set_code` before raising, as generated base classes do for UNIMPLEMENTED) is kept. With
restricted protocol groups (service/api/restrictions.py `Gate`), a call of a restricted group whose metadata
lacks the header is answered UNAVAILABLE before its handler runs (and counted as such), as Triton answers it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from service.api.grpc.context import grpc_status_of
from service.api.restrictions import Gate
from service.api.status import clip
from service.ops import metrics

log = logging.getLogger(__name__)


def _method_label(full_method: str) -> str:
    """"/pkg.Service/Method" -> "pkg.Service/Method"."""
    return full_method.lstrip("/")


# A client whose deadline expires cancels the stream itself, which can reach the server a few
# milliseconds before the server's own copy of the deadline passes: count that as expired too.
DEADLINE_SLACK_S = 0.2


def _cancel_code(context: aio.ServicerContext) -> grpc.StatusCode:
    """Why a handler task was cancelled: the deadline passed, or the client (or shutdown) cancelled."""
    remaining = context.time_remaining()
    expired = remaining is not None and remaining <= DEADLINE_SLACK_S
    return grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED


class _Call:
    """Bookkeeping of one RPC: start time, final code, and the exception -> status translation."""

    def __init__(self, method: str, context: aio.ServicerContext) -> None:
        """Start timing a call."""
        self.method, self.context = method, context
        self.labels = metrics.start_request()
        self.start = time.perf_counter()
        self.code = grpc.StatusCode.OK

    def _preset_code(self) -> grpc.StatusCode | None:
        """A non-OK code the handler already put on the context, if any."""
        code = self.context.code()
        if code is None or code == grpc.StatusCode.OK:
            return None
        if isinstance(code, grpc.StatusCode):
            return code
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)

    async def fail(self, exc: BaseException) -> None:
        """Abort the call with the status of `exc` (always raises)."""
        preset = self._preset_code()
        if isinstance(exc, aio.AbortError):  # context.abort() was called: its status stands
            self.code = preset or grpc.StatusCode.UNKNOWN
            raise exc
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):  # client cancel, deadline, shutdown
            self.code = _cancel_code(self.context)
            raise exc
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not a call failure
            raise exc
        if preset is not None:
            code, message = preset, clip(self.context.details() or grpc_status_of(exc)[1])
        else:
            code, message = grpc_status_of(exc)
        self.code = code
        if code == grpc.StatusCode.INTERNAL:
            log.error("%s failed: %s (%s)", self.method, message, type(exc).__name__, exc_info=exc)
        else:
            log.debug("%s: %s %s", self.method, code.name, message)
        await self.context.abort(code, message)

    def done(self) -> None:
        """Record the call in the metrics (a code set without raising counts too)."""
        if self.code == grpc.StatusCode.OK:
            self.code = self._preset_code() or grpc.StatusCode.OK
        metrics.observe_request(self.method, self.code.name, time.perf_counter() - self.start, "grpc",
                                self.labels.model, self.labels.version)


async def _result(value: Any) -> Any:
    """Await `value` when a handler returned an awaitable (sync handlers return plain values)."""
    return await value if inspect.isawaitable(value) else value


def _wrap_unary_response(behavior: Callable, method: str) -> Callable[..., Awaitable[Any]]:
    """Wrap a handler that returns its response (unary or client-streaming request)."""

    async def handler(request_or_iterator: Any, context: aio.ServicerContext) -> Any:
        """The wrapped handler."""
        call = _Call(method, context)
        try:
            return await _result(behavior(request_or_iterator, context))
        except BaseException as exc:  # noqa: BLE001 - every outcome must be mapped and counted
            await call.fail(exc)
        finally:
            call.done()

    return handler


def _wrap_streaming_response(behavior: Callable, method: str) -> Callable:
    """Wrap a handler that streams responses: an async generator, or a coroutine using context.write."""
    if inspect.isasyncgenfunction(behavior) or inspect.isgeneratorfunction(behavior):

        async def stream(request_or_iterator: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
            """The wrapped streaming handler."""
            call = _Call(method, context)
            try:
                responses = behavior(request_or_iterator, context)
                if inspect.isasyncgen(responses):
                    async for response in responses:
                        yield response
                else:
                    for response in responses:
                        yield response
            except BaseException as exc:  # noqa: BLE001
                await call.fail(exc)
            finally:
                call.done()

        return stream
    return _wrap_unary_response(behavior, method)


def _header(metadata: Sequence[tuple[str, str | bytes]] | None, name: str) -> str | None:
    """The first value of metadata key `name` (text keys only), or None."""
    return next((v for k, v in metadata or () if k == name and isinstance(v, str)), None)


def _refuse(method: str, message: str) -> Callable[..., Awaitable[None]]:
    """A behavior that answers UNAVAILABLE with `message` (a restricted call without its header)."""

    async def refuse(request_or_iterator: Any, context: aio.ServicerContext) -> None:
        """Abort at once: the request is never handled."""
        log.debug("%s refused: %s", method, message)
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    return refuse


class ErrorMappingInterceptor(aio.ServerInterceptor):
    """Maps exceptions of every handler to gRPC statuses and records one metrics sample per RPC; refuses
    the calls `gate` restricts when they lack its header."""

    def __init__(self, gate: Gate | None = None) -> None:
        """`gate`: the gRPC restrictions (None or an empty gate: nothing restricted)."""
        self.gate = gate if gate else None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """Wrap the behavior of the handler gRPC selected, whatever its streaming kind."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = _method_label(handler_call_details.method)
        refusal = None
        if self.gate is not None:
            metadata = handler_call_details.invocation_metadata
            refusal = self.gate.refusal(method, lambda name: _header(metadata, name))

        def behavior(given: Callable) -> Callable:
            """The handler's own behavior, or the refusal."""
            return given if refusal is None else _refuse(method, refusal)

        codecs = {"request_deserializer": handler.request_deserializer,
                  "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary_response(behavior(handler.unary_unary), method), **codecs)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_streaming_response(behavior(handler.unary_stream), method), **codecs)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary_response(behavior(handler.stream_unary), method), **codecs)
        return grpc.stream_stream_rpc_method_handler(
            _wrap_streaming_response(behavior(handler.stream_stream), method), **codecs)
