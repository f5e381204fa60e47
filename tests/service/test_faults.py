"""Faults inside a running server (in-process, tiny bundle): a crashed inference thread and a stuck
model run are reported by health (NOT_SERVING) and their queued and in-flight calls get UNAVAILABLE
instead of hanging; a stuck run that comes back leaves the server SERVING and correct again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.scheduling.scheduler import SchedulerState
from service.server import BackgroundServer
from tests.support.decoding import reference
from tests.support.polling import wait_until
from tests.support.server import NOT_SERVING, SERVING, TEXTS, server_config

LONG = pb.TranslateOptions(max_output_tokens=60)
WATCHDOG_S = 0.5


class Crash(BaseException):
    """Not an Exception: nothing on the worker's normal error path catches it, so the thread dies."""


class Hold:
    """Fault hook: the first decoder step blocks until released (bounded), then raises `then`, if any."""

    def __init__(self, then: BaseException | None = None) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.then, self.held = then, False

    def __call__(self, stage: str) -> None:
        """Block the first decoder step."""
        if stage != "decoder" or self.held:
            return
        self.held = True
        self.entered.set()
        self.release.wait(30)
        if self.then is not None:
            raise self.then


@pytest.fixture()
def hold(runner: Runner) -> Iterator[Hold]:
    """A Hold installed on the runner, always released and removed."""
    yield (gate := Hold())
    gate.release.set()
    runner.fault_hook = None


def health(channel: grpc.Channel) -> int:
    """Overall health status."""
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def in_flight_and_queued(stub: pb_grpc.TranslatorStub, gate: Hold, srv: BackgroundServer) -> tuple:
    """A call held in the decode batch by the gate, and one waiting in the queue behind it (one row)."""
    first = stub.Translate.future(pb.TranslateRequest(texts=[TEXTS[0]], options=LONG), timeout=60)
    assert gate.entered.wait(20)
    queued = stub.Translate.future(pb.TranslateRequest(texts=[TEXTS[1]], options=LONG), timeout=60)
    assert wait_until(lambda: srv.running.scheduler.queue_depth == 1)
    return first, queued


def test_crashed_worker_fails_its_calls_and_reports_not_serving(tiny_bundle, runner, hold):
    """The inference thread dies mid-step: both calls get UNAVAILABLE, health turns NOT_SERVING, and a
    new call is refused at once with UNAVAILABLE rather than queued for nobody."""
    hold.then = Crash("injected crash")
    with BackgroundServer(server_config(tiny_bundle, max_batch_size=1), runner) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        runner.fault_hook = hold  # after the warm-up
        stub = pb_grpc.TranslatorStub(ch)
        first, queued = in_flight_and_queued(stub, hold, srv)
        hold.release.set()
        for call in (first, queued):
            error = call.exception(timeout=20)
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
            assert "stopped unexpectedly" in error.details() and "Crash" not in error.details()
        assert wait_until(lambda: health(ch) == NOT_SERVING, timeout=10)
        assert not srv.running.scheduler.healthy and srv.running.scheduler.state == SchedulerState.STOPPED
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(pb.TranslateRequest(texts=[TEXTS[2]]), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() - start < 20


def test_stuck_run_fails_its_calls_then_recovers(tiny_bundle, runner, hold):
    """A decoder step stuck past --watchdog-s: NOT_SERVING, the held and the queued call get
    UNAVAILABLE, new calls are refused; once the step returns: SERVING, correct translations."""
    config = server_config(tiny_bundle, max_batch_size=1, watchdog_s=WATCHDOG_S)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as ch:
        runner.fault_hook = hold
        stub = pb_grpc.TranslatorStub(ch)
        first, queued = in_flight_and_queued(stub, hold, srv)
        for call in (first, queued):
            error = call.exception(timeout=20)
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
            assert "stuck" in error.details()
        assert wait_until(lambda: health(ch) == NOT_SERVING, timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(pb.TranslateRequest(texts=[TEXTS[2]]), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "stuck" in err.value.details()
        hold.release.set()  # the step returns: the worker drops the abandoned text and goes on
        assert wait_until(lambda: health(ch) == SERVING, timeout=10)
        scheduler = srv.running.scheduler
        assert wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0)
        result = stub.Translate(pb.TranslateRequest(texts=[TEXTS[3]], options=LONG), timeout=30).results[0]
    want = reference(runner, TEXTS[3], DecodeOptions(max_new_tokens=60))[0]
    assert list(result.hypotheses[0].token_ids) == want
