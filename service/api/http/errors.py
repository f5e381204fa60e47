"""Errors and metrics of every HTTP request: one middleware around all handlers.

Handlers raise domain exceptions (InvalidInput, UnknownModel, QueueFull, ...) as the gRPC servicers do; this
middleware answers them as JSON `{"error": "..."}` with the HTTP status of the one table
(service/api/status.py `http_status_of`), and records `metrics.observe_request(method, code, seconds, "http")`
once per request, the code being the table's gRPC name ("OK", "INVALID_ARGUMENT", ...) so that the error-ratio
rules read both protocols alike. The method label is the route's path pattern ("/v2/models/{model}/infer",
...): unknown paths share one label, so clients cannot grow the series. The model and version labels are what
the repository resolved for the request, else the repository's label of the URL's model and version
(MODEL_LABEL_KEY: a request refused before it reached the repository, a malformed body say); names the
repository lacks share one label. aiohttp's own refusals (no such route, wrong method, a body over the size
limit) come as JSON too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from service.api.status import clip, http_status_of
from service.ops import metrics

log = logging.getLogger(__name__)

UNMATCHED = "unmatched"  # the method label of requests no route took
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# aiohttp's HTTP refusals as the table's gRPC names (for the metrics' code label)
HTTP_NAMES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 405: "UNIMPLEMENTED",
              408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT",
              501: "UNIMPLEMENTED", 503: "UNAVAILABLE"}
CODE_KEY = web.RequestKey("code", str)  # a handler that answered an error itself (a stream) says which
# (model, version) -> the repository's metrics labels of them (ModelRepository.label)
MODEL_LABEL_KEY = web.AppKey("model_label", Callable[[str, str], tuple[str, str]])


class RequestRejected(Exception):
    """A request refused before it reaches a servicer, with its own HTTP status (413: too large, 408:
    its body did not arrive in time, 403: a restricted API group without its header)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_response(payload: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON body (UTF-8, compact)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def error_response(status: int, message: str) -> web.Response:
    """The `{"error": "..."}` answer of KServe v2 REST and Triton."""
    return json_response({"error": clip(message)}, status=status)


def method_label(request: web.Request) -> str:
    """The metrics label of a request: its route's path pattern ("/v2/models/{model}/infer"), or
    UNMATCHED."""
    if request.match_info.http_exception is not None:
        return UNMATCHED
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED


def _reason(exc: web.HTTPException) -> str:
    """What aiohttp's refusal says, for the JSON error."""
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return f"the request body is larger than this server accepts: {exc.text}"
    if isinstance(exc, web.HTTPNotFound):
        return "no such endpoint (KServe v2 REST: /v2, /v2/health/*, /v2/models/{model}[/versions/{v}]/...)"
    return exc.text or exc.reason


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every outcome of a handler to an HTTP answer and count it once."""
    start = time.perf_counter()
    code = "OK"
    labels = metrics.start_request()
    try:
        response = await handler(request)
        code = request.get(CODE_KEY, "OK")
        return response
    except web.HTTPException as exc:  # aiohttp's: unknown path, wrong method, body too large
        if exc.status < 400:
            raise
        code = HTTP_NAMES.get(exc.status, "INVALID_ARGUMENT" if exc.status < 500 else "INTERNAL")
        return error_response(exc.status, _reason(exc))
    except RequestRejected as exc:
        code = HTTP_NAMES.get(exc.status, "INVALID_ARGUMENT")
        response = error_response(exc.status, str(exc))
        if exc.status == 408:  # the rest of a late body is no request: the connection ends after the answer
            response.force_close()
        return response
    except asyncio.CancelledError:  # the client went away (handler cancellation) or the server stops
        code = "CANCELLED"
        raise
    except ConnectionError:  # the client went away while a stream was written
        code = "CANCELLED"
        raise
    except Exception as exc:  # noqa: BLE001 - every outcome must be answered and counted
        status, code, message = http_status_of(exc)
        if status >= 500 and code == "INTERNAL":
            log.error("%s %s failed: %s", request.method, request.path, message, exc_info=exc)
        return error_response(status, message)
    finally:
        model, version = _model_labels(request, labels)
        metrics.observe_request(method_label(request), code, time.perf_counter() - start, "http", model,
                                version)


def _model_labels(request: web.Request, labels: metrics.RequestModel) -> tuple[str, str]:
    """The request's model labels: as the repository resolved them, else of the URL's model (if any)."""
    name = request.match_info.get("model") if request.match_info.http_exception is None else None
    if labels.model != metrics.NO_MODEL or not name or MODEL_LABEL_KEY not in request.app:
        return labels.model, labels.version
    return request.app[MODEL_LABEL_KEY](name, request.match_info.get("version", ""))
