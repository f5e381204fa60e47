"""The HTTP/REST server: an aiohttp application on the gRPC server's event loop.

Why aiohttp: a mature asyncio HTTP/1.1 server that runs inside an already running loop (grpc.aio's) with no
second loop, thread or process, streams responses (server-sent events) and cancels a handler when its client
disconnects (`handler_cancellation`), which is how a gone client's rows leave the batch. uvicorn with
starlette would bring ASGI and its own server lifecycle for the same.

Limits: a body is at most `max_body_bytes` (the gRPC message limit, --max-message-bytes; 413 beyond) and must
arrive within `read_timeout_s` (--http-read-timeout-s; 408 after, and the connection closes once aiohttp's
lingering close, at most LINGER_S and no longer than the read timeout, has read what follows). The same time
bounds a request's headers: aiohttp's keep-alive timeout, which closes a connection whose next request has not
arrived in full that long after it opened or after its last answer (a slowloris sending headers byte by byte
included: bytes do not extend it). Request lines and header fields are at most HEADER_BYTES. TLS (and mutual
TLS) uses the gRPC server's certificate, key and client CA. Restricted API groups (--http-restricted-api,
service/api/restrictions.py): the `restrict` middleware answers a request of a restricted route without its
header 403, as Triton does, before its body is read.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from aiohttp import web

from service.api.http import detect, document, generate, kserve_rest, score
from service.api.http.body import LIMITS_KEY
from service.api.http.context import PLANE_KEY
from service.api.http.errors import MODEL_LABEL_KEY, Handler, RequestRejected, method_label, observe
from service.api.restrictions import HTTP, Gate, Restrictions
from service.dataplane.calls import DataPlane
from service.ops import metrics

log = logging.getLogger(__name__)

HEADER_BYTES = 8190  # longest request line / header field (aiohttp's default)
LINGER_S = 10.0  # after an answer to an unread body, the longest wait reading (and dropping) the rest
GATE_KEY = web.AppKey("restrictions", Gate)


def ssl_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """The server's TLS context; with client_ca, clients must present a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.load_verify_locations(cafile=str(client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"cannot use the TLS certificate {cert} / key {key} for HTTP: {exc}") from None
    return context


@web.middleware
async def restrict(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse (403, inside `observe`: counted) a request of a restricted group that lacks its header."""
    if request.match_info.http_exception is None:  # unknown paths and methods get their own answer
        refusal = request.app[GATE_KEY].refusal(method_label(request), request.headers.get)
        if refusal is not None:
            raise RequestRejected(403, refusal)
    return await handler(request)


def make_app(plane: DataPlane, max_body_bytes: int, read_timeout_s: float,
             restrictions: Restrictions | None = None) -> web.Application:
    """The application: KServe v2 REST, generate and score routes on the data plane, errors and metrics
    around them, and the restricted API groups (--http-restricted-api) checked first."""
    gate = Gate(HTTP, restrictions or {})
    middlewares = [observe, restrict] if gate else [observe]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[GATE_KEY] = gate
    app[PLANE_KEY] = plane
    app[LIMITS_KEY] = (max_body_bytes, read_timeout_s)
    app[MODEL_LABEL_KEY] = plane.models.label
    kserve_rest.add_routes(app)
    generate.add_routes(app)
    score.add_routes(app)
    document.add_routes(app)
    detect.add_routes(app)
    # every route's series from the start, as gRPC's: rate() sees the first request of each
    routes = sorted({r.canonical for r in app.router.resources()})
    metrics.init_request_counts(routes, protocol="http", model_methods=[r for r in routes if "{model}" in r])
    return app


class HttpServer:
    """The started HTTP server: `start` binds, `stop` lets in-flight requests finish within a grace."""

    def __init__(self, app: web.Application, host: str, port: int, context: ssl.SSLContext | None = None,
                 shutdown_timeout_s: float = 2.0) -> None:
        self.host, self.requested_port, self.context = host, port, context
        _, read_timeout_s = app[LIMITS_KEY]
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                    shutdown_timeout=shutdown_timeout_s, max_line_size=HEADER_BYTES,
                                    max_field_size=HEADER_BYTES, keepalive_timeout=read_timeout_s,
                                    lingering_time=min(LINGER_S, read_timeout_s))
        self.port = 0
        self.started = False

    async def start(self) -> int:
        """Listen; the bound port (useful with port 0)."""
        await self.runner.setup()
        self.started = True
        site = web.TCPSite(self.runner, self.host, self.requested_port, ssl_context=self.context)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            where = f"{self.host}:{self.requested_port}"
            raise OSError(f"cannot listen for HTTP on {where}: {exc.strerror or exc}") from None
        self.port = int(self.runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        """Stop listening, give running requests the shutdown timeout, close connections."""
        if self.started:
            self.started = False
            await self.runner.cleanup()
