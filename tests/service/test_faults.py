"""Faults inside a running server (in-process, tiny bundle): a crashed inference thread and a stuck
model run are reported by health (NOT_SERVING) and their queued and in-flight calls get UNAVAILABLE
(HTTP: 503 with a JSON error) instead of hanging; a stuck run that comes back leaves the server
SERVING and correct again, over both protocols."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.scheduling.scheduler import SchedulerState
from service.server import BackgroundServer
from tests.support.decoding import best_texts, best_tokens
from tests.support.http import post_json
from tests.support.polling import wait_until
from tests.support.scheduling import Gate, gate_on
from tests.support.server import NOT_SERVING, SERVING, TEXTS, health_status, server_config

LONG = pb.TranslateOptions(max_output_tokens=60)
WATCHDOG_S = 0.5


class Crash(BaseException):
    """Not an Exception: nothing on the worker's normal error path catches it, so the thread dies."""


def generate(srv: BackgroundServer, text: str) -> tuple[int, dict]:
    """POST generate over HTTP: (status, JSON answer)."""
    status, kind, body = post_json(f"http://{srv.http_address}/v2/models/translator/generate",
                                   {"text_input": text, "max_tokens": 60})
    assert kind == "application/json", body
    return status, json.loads(body)


def in_flight_and_queued(stub: pb_grpc.TranslatorStub, gate: Gate, srv: BackgroundServer,
                         pool: ThreadPoolExecutor) -> tuple[grpc.Future, grpc.Future, Future]:
    """A call held in the decode batch by the gate, and a gRPC call and an HTTP request waiting in the
    queue behind it (one row each)."""
    first = stub.Translate.future(pb.TranslateRequest(texts=[TEXTS[0]], options=LONG), timeout=60)
    gate.wait_held()
    queued = stub.Translate.future(pb.TranslateRequest(texts=[TEXTS[1]], options=LONG), timeout=60)
    wait_until(lambda: srv.running.scheduler.queue_depth == 1, "the second call queued")
    http = pool.submit(generate, srv, TEXTS[2])
    wait_until(lambda: srv.running.scheduler.queue_depth == 2, "the HTTP request queued")
    return first, queued, http


def test_crashed_worker_fails_its_calls_and_reports_not_serving(tiny_bundle, runner):
    """The inference thread dies mid-step: both calls get UNAVAILABLE, health turns NOT_SERVING, and a
    new call is refused at once with UNAVAILABLE rather than queued for nobody."""
    # the first decoder step is held, then raises Crash
    gate = Gate("decoder", at=(1,), fail=lambda stage, n: stage == "decoder" and n == 1,
                error=lambda stage: Crash("injected crash"))
    config = server_config(tiny_bundle, max_batch_size=1, http_port=0)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as ch, \
            ThreadPoolExecutor(1) as pool, gate_on(runner, gate):  # after the warm-up
        stub = pb_grpc.TranslatorStub(ch)
        first, queued, http = in_flight_and_queued(stub, gate, srv, pool)
        gate.release()
        for call in (first, queued):
            error = call.exception(timeout=20)
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
            assert "stopped unexpectedly" in error.details() and "Crash" not in error.details()
        status, answer = http.result(timeout=20)
        assert status == 503 and "stopped unexpectedly" in answer["error"] and "Crash" not in answer["error"]
        wait_until(lambda: health_status(ch) == NOT_SERVING, "health NOT_SERVING", timeout=10)
        assert not srv.running.scheduler.healthy and srv.running.scheduler.state == SchedulerState.STOPPED
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(pb.TranslateRequest(texts=[TEXTS[2]]), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() - start < 20
        status, answer = generate(srv, TEXTS[2])  # refused at once over HTTP too
        assert status == 503 and "error" in answer, answer


def test_stuck_run_fails_its_calls_then_recovers(tiny_bundle, runner):
    """A decoder step stuck past --watchdog-s: NOT_SERVING, the held and the queued call get
    UNAVAILABLE, new calls are refused; once the step returns: SERVING, correct translations."""
    config = server_config(tiny_bundle, max_batch_size=1, watchdog_s=WATCHDOG_S, http_port=0)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as ch, \
            ThreadPoolExecutor(1) as pool, gate_on(runner, Gate("decoder", at=(1,))) as gate:
        stub = pb_grpc.TranslatorStub(ch)
        first, queued, http = in_flight_and_queued(stub, gate, srv, pool)
        for call in (first, queued):
            error = call.exception(timeout=20)
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
            assert "stuck" in error.details()
        status, answer = http.result(timeout=20)
        assert status == 503 and "stuck" in answer["error"], answer
        wait_until(lambda: health_status(ch) == NOT_SERVING, "health NOT_SERVING", timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(pb.TranslateRequest(texts=[TEXTS[2]]), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "stuck" in err.value.details()
        status, answer = generate(srv, TEXTS[2])
        assert status == 503 and "stuck" in answer["error"], answer
        gate.release()  # the step returns: the worker drops the abandoned text and goes on
        wait_until(lambda: health_status(ch) == SERVING, "health SERVING again", timeout=10)
        scheduler = srv.running.scheduler
        wait_until(lambda: scheduler.active_sequences == scheduler.queue_depth == 0, "an empty scheduler")
        result = stub.Translate(pb.TranslateRequest(texts=[TEXTS[3]], options=LONG), timeout=30).results[0]
        status, answer = generate(srv, TEXTS[3])
    options = DecodeOptions(max_output_tokens=60)
    assert list(result.hypotheses[0].token_ids) == best_tokens(runner, TEXTS[3], options)
    assert status == 200 and answer["text_output"] == best_texts(runner, TEXTS[3:4], options)[0]
