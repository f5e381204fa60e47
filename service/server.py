"""The server: `python -m service.server [flags]` (see service/config.py for flags and env vars).

Serves translator.v1.Translator, inference.GRPCInferenceService (KServe v2), KServe ModelMesh's
mmesh.ModelRuntime (only under --modelmesh: its RPCs are UNIMPLEMENTED otherwise), grpc.health.v1 and server
reflection on one grpc.aio server; KServe v2 REST and Triton's generate extension over HTTP on --http-port
(service/api/http/, same event loop, models and limits); plus Prometheus /metrics on its own HTTP port. Health
is SERVING only once the model is loaded and has translated a warm-up text, and NOT_SERVING while draining or
while the scheduler reports itself unhealthy. On SIGTERM / SIGINT the server drains: health NOT_SERVING, no
new calls (HTTP ones answered 503 while the models drain), in-flight calls get `--drain-grace-s` seconds, exit
code 0. Restricted protocol groups (--grpc-restricted-protocol, --http-restricted-api:
service/api/restrictions.py) are checked by the interceptor and the HTTP middleware; when clients could change
what is served (control mode explicit / on-demand) through an unrestricted repository API or ModelMesh,
start-up logs one warning saying so. `serve(config)` starts everything in the running event loop (tests use it
in-process through `BackgroundServer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from protos.inference import grpc_service_pb2, grpc_service_pb2_grpc
from protos.modelmesh import model_runtime_pb2_grpc
from protos.translator.v1 import translator_pb2, translator_pb2_grpc
from service.api import tls
from service.api.grpc.catalog import (
    MODEL_RUNTIME,
    counted_methods,
    model_methods,
    reflection_pool,
    service_names,
)
from service.api.grpc.interceptor import ErrorMappingInterceptor
from service.api.grpc.kserve import InferenceServicer
from service.api.grpc.modelmesh import ModelRuntimeServicer
from service.api.grpc.translator import TranslatorServicer
from service.api.http.app import HttpServer, make_app, ssl_context
from service.api.restrictions import GRPC, Gate, exposure_warning
from service.assembly import build_repository
from service.config import ServerConfig, parse_config
from service.dataplane.calls import DataPlane
from service.dataplane.documents import DocumentLimits
from service.domain.errors import BundleError, ProviderUnavailable
from service.models.mesh import MeshModels
from service.models.repository import ModelRepository
from service.models.served import ServedModel
from service.ops import metrics
from service.ops.malloc import tune_malloc
from service.ops.readiness import Readiness
from service.runtime.runner import Runner
from service.scheduling.scheduler import Scheduler

log = logging.getLogger("service.server")

HEALTH_POLL_S = 0.25
DRAIN_MARGIN_S = 2.0
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
T = TypeVar("T")


def grpc_options(config: ServerConfig) -> list[tuple[str, Any]]:
    """Channel arguments of the server: message size, concurrent streams per connection, connection age."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
    ]
    if config.max_connection_age_ms > 0:  # GOAWAY: new calls go to a new connection
        options.append(("grpc.max_connection_age_ms", config.max_connection_age_ms))
        if config.max_connection_age_grace_ms > 0:  # else gRPC's own: running calls finish (a document)
            options.append(("grpc.max_connection_age_grace_ms", config.max_connection_age_grace_ms))
    return options


def _bind(server: aio.Server, config: ServerConfig) -> int:
    """Add the listening port (TLS when a certificate is configured); returns the bound port."""
    if config.tls_cert is not None and config.tls_key is not None:
        credentials = tls.server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)
        port = server.add_secure_port(config.address, credentials)
    else:
        port = server.add_insecure_port(config.address)
    if port == 0:
        raise OSError(f"cannot listen on {config.address}")
    return port


@dataclass
class RunningServer:
    """A started server and everything it owns; `stop` drains it."""

    config: ServerConfig
    server: aio.Server
    port: int
    metrics_port: int | None
    models: ModelRepository
    health: health.aio.HealthServicer
    readiness: Readiness
    http: HttpServer | None = None
    _poller: asyncio.Task | None = field(default=None, repr=False)

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (None: HTTP is off)."""
        return self.http.port if self.http is not None and self.http.port else None

    @property
    def model(self) -> ServedModel:
        """The one loaded model (tests and tools of a one-model server)."""
        (model,) = self.models.loaded()
        return model

    @property
    def runner(self) -> Runner:
        """The one loaded model's runner."""
        return self.model.runner

    @property
    def scheduler(self) -> Scheduler:
        """The one loaded model's scheduler."""
        return self.model.scheduler

    async def _set_health(self, status: int) -> None:
        """Set the overall and every per-service health status."""
        for name in ("", *service_names(self.config.modelmesh)):
            await self.health.set(name, status)

    async def watch_health(self, current: int) -> None:
        """Follow readiness (draining, scheduler health) into the health service, from `current` on; and
        answer the callers of a stuck inference worker (UNAVAILABLE) instead of letting them hang."""
        while True:
            await asyncio.sleep(HEALTH_POLL_S)
            for model in self.models.loaded():
                model.scheduler.fail_if_stuck()
            status = _SERVING if self.readiness.ready else _NOT_SERVING
            if status != current:
                await self._set_health(status)
                log.warning("health changed to %s", health_pb2.HealthCheckResponse.ServingStatus.Name(status))
                current = status

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: health NOT_SERVING, refuse new calls, give in-flight calls grace_s, then stop."""
        grace = self.config.drain_grace_s if grace_s is None else grace_s
        self.readiness.draining = True
        await self.health.enter_graceful_shutdown()
        if self._poller is not None:
            self._poller.cancel()
        log.info("draining: in-flight requests have %.1f s", grace)
        # The port stays open while the scheduler drains, so that a call arriving now gets a clear
        # UNAVAILABLE ("shutting down") from the scheduler rather than a transport-level cancel; what
        # is still running at `grace` is answered UNAVAILABLE too, and the server then gives those
        # answers (and any other call) DRAIN_MARGIN_S to leave before it cancels what remains.
        await self.models.close(grace)
        if self.http is not None:
            await self.http.stop()  # in-flight HTTP answers get DRAIN_MARGIN_S, as gRPC's
        await self.server.stop(DRAIN_MARGIN_S)
        if self.metrics_port is not None:
            metrics.stop_metrics_servers()
        log.info("stopped")

    async def wait_for_termination(self) -> None:
        """Return when the gRPC server has stopped."""
        await self.server.wait_for_termination()


async def serve(config: ServerConfig, runner: Runner | None = None) -> RunningServer:
    """Load the models the control mode names (`runner`, when given, serves --bundle), start every
    service in this event loop; each model translates a warm-up text before it serves."""
    models = build_repository(config, runner)
    readiness = Readiness(scheduler_healthy=lambda: all(m.scheduler.healthy for m in models.loaded()))
    gate = Gate(GRPC, config.grpc_restricted_protocol)
    server = aio.server(interceptors=[ErrorMappingInterceptor(gate)], options=grpc_options(config))
    # all series from the start: rate() sees the first call
    metrics.init_request_counts(counted_methods(config.modelmesh),
                                model_methods=model_methods(config.modelmesh))
    plane = DataPlane(models, lambda: readiness.ready, config.queue_size,
                      DocumentLimits(config.max_document_bytes, config.max_document_sentences),
                      config.detect_min_confidence)
    translator_pb2_grpc.add_TranslatorServicer_to_server(TranslatorServicer(plane), server)
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(plane), server)
    if config.modelmesh:  # its design assumes a port that only the pod's ModelMesh container reaches
        model_runtime_pb2_grpc.add_ModelRuntimeServicer_to_server(
            ModelRuntimeServicer(MeshModels(models), lambda: readiness.ready), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    files = [translator_pb2.DESCRIPTOR, grpc_service_pb2.DESCRIPTOR, health_pb2.DESCRIPTOR,
             reflection_pb2.DESCRIPTOR]
    pool = reflection_pool(files + ([MODEL_RUNTIME.file] if config.modelmesh else []))
    reflection.enable_server_reflection([*service_names(config.modelmesh), reflection.SERVICE_NAME], server,
                                        pool=pool)
    running = RunningServer(config, server, 0, None, models, health_servicer, readiness)
    if config.http_port >= 0:
        app = make_app(plane, config.max_message_bytes, config.http_read_timeout_s,
                       config.http_restricted_api)
        context = (ssl_context(config.tls_cert, config.tls_key, config.tls_client_ca)
                   if config.tls_cert is not None and config.tls_key is not None else None)
        running.http = HttpServer(app, config.http_host, config.http_port, context, DRAIN_MARGIN_S)
    try:
        await models.start(list(config.load_model))
        running.port = _bind(server, config)
        if running.http is not None:
            await running.http.start()
        await running._set_health(_NOT_SERVING)
        await server.start()
        if config.metrics_port >= 0:
            running.metrics_port = metrics.start_metrics_server(config.metrics_port, config.metrics_host)
    except BaseException:
        await running.stop(0.0)
        raise
    readiness.warmed_up = True
    status = _SERVING if readiness.ready else _NOT_SERVING
    await running._set_health(status)  # SERVING before serve() returns: callers may probe at once
    running._poller = asyncio.create_task(running.watch_health(status))
    log.info("serving %s on %s:%d (HTTP port %s, control mode %s, metrics port %s)",
             ", ".join(sorted(models.models)) or "no model yet", config.host, running.port,
             running.http_port, config.model_control_mode, running.metrics_port)
    http_restrictions = config.http_restricted_api if config.http_port >= 0 else None
    if (warning := exposure_warning(config.model_control_mode, config.modelmesh,
                                    config.grpc_restricted_protocol, http_restrictions)) is not None:
        log.warning("%s", warning)
    return running


async def run(config: ServerConfig) -> int:
    """Serve until SIGTERM / SIGINT, then drain; the process exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = await serve(config)
    if config.port_file is not None:
        temp = config.port_file.with_name(config.port_file.name + ".tmp")
        temp.write_text(f"{running.port}\n", encoding="utf-8")
        temp.replace(config.port_file)  # atomic: readers never see a partial file
    print(f"listening on {config.host}:{running.port}", flush=True)
    terminated = asyncio.create_task(running.wait_for_termination())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([terminated, stopping], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        log.info("signal received")
        await running.stop()
    terminated.cancel()
    stopping.cancel()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    config = parse_config(argv)
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tune_malloc()  # before the runner and gRPC allocate (service/ops/malloc.py)
    try:
        return asyncio.run(run(config))
    except BundleError as exc:
        print(f"error: cannot serve the model bundle: {exc}\n"
              "Pass a bundle directory with --bundle (or TRANSLATOR_BUNDLE).", file=sys.stderr)
        return 2
    except ProviderUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - e.g. the warm-up translation failed: never half-serve
        log.critical("the server failed", exc_info=exc)
        print(f"error: the server failed: {exc}", file=sys.stderr)
        return 1


class BackgroundServer:
    """A server on a shared background event loop, for tests, benchmarks and notebooks."""

    _loop: asyncio.AbstractEventLoop | None = None
    _loop_lock = threading.Lock()

    def __init__(self, config: ServerConfig, runner: Runner | None = None) -> None:
        """Not started yet; `runner` is reused when given (tests share one)."""
        self.config, self.runner = config, runner
        self.running: RunningServer | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        """The process-wide loop thread every BackgroundServer runs on (grpc.aio prefers one loop)."""
        with cls._loop_lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, name="grpc-aio-loop", daemon=True).start()
            return cls._loop

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the server loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop()).result(timeout)

    def start(self) -> BackgroundServer:
        """Start serving (model load and warm-up included)."""
        self.running = self.call(serve(self.config, self.runner))
        return self

    @property
    def address(self) -> str:
        """host:port clients connect to."""
        assert self.running is not None, "server not started"
        return f"{self.config.host}:{self.running.port}"

    @property
    def http_address(self) -> str:
        """host:port of the HTTP server."""
        assert self.running is not None and self.running.http_port is not None, "no HTTP server"
        return f"{self.config.host}:{self.running.http_port}"

    def stop(self, grace_s: float = 0.0) -> None:
        """Drain and stop."""
        if self.running is not None:
            with contextlib.suppress(TimeoutError):
                self.call(self.running.stop(grace_s), timeout=grace_s + 30.0)
            self.running = None

    def __enter__(self) -> BackgroundServer:
        """Start on entering a with-block."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stop on leaving a with-block."""
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
