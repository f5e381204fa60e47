"""Server behaviour over time: deadlines, cancellation, a full queue, a failing batch, draining
in-process and on SIGTERM / SIGINT (a real `python -m service.server` process), a bad bundle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime.model.cuda import cuda_unavailable
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support import REPO_ROOT
from tests.support.decoding import best_tokens
from tests.support.polling import wait_until
from tests.support.scheduling import Gate, gate_on
from tests.support.server import NOT_SERVING, SERVING, TEXTS, health_status, server_config, slow_server

SHORT = pb.TranslateOptions(max_output_tokens=10)
LONG = pb.TranslateOptions(max_output_tokens=60)


@pytest.fixture()
def fresh_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A fresh continuous-batching server per test (some tests stop it)."""
    with BackgroundServer(server_config(tiny_bundle), runner) as srv:
        yield srv


def answered(code: str) -> float:
    """Translate calls the server answered with `code` so far (its request counter)."""
    return metrics.counter_value(metrics.REQUESTS, method="translator.v1.Translator/Translate", code=code)


def assert_recovered(srv: BackgroundServer, runner: Runner) -> None:
    """Nothing left in the scheduler, health SERVING, and the next call translates correctly."""
    scheduler = srv.running.scheduler
    wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0, "an empty scheduler")
    with grpc.insecure_channel(srv.address) as ch:
        assert health_status(ch) == SERVING and scheduler.healthy
        request = pb.TranslateRequest(texts=[TEXTS[1]], options=SHORT)
        result = pb_grpc.TranslatorStub(ch).Translate(request, timeout=30).results[0]
    want = best_tokens(runner, TEXTS[1], DecodeOptions(max_output_tokens=10))
    assert list(result.hypotheses[0].token_ids) == want


def test_deadline_exceeded_frees_the_slot(fresh_server, runner):
    """An expired call is DEADLINE_EXCEEDED; its texts leave the batch and the server stays healthy."""
    scheduler = fresh_server.running.scheduler
    before = answered("DEADLINE_EXCEEDED")
    # the worker is held before decoder steps 1 and 3: the texts cannot finish in between
    with gate_on(runner, Gate("decoder", at=(1, 3))) as gate, \
            grpc.insecure_channel(fresh_server.address) as ch:
        request = pb.TranslateRequest(texts=TEXTS, options=LONG)
        call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=0.5)
        gate.wait_held()
        assert scheduler.active_sequences == len(TEXTS)  # decoding, held by the gate
        with pytest.raises(grpc.RpcError) as err:
            call.result(timeout=20)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until(lambda: answered("DEADLINE_EXCEEDED") == before + 1, "the server to give up too")
        gate.release(1)  # far fewer steps than the texts need: they leave, they do not finish
        wait_until(lambda: scheduler.active_sequences == 0, "the texts to leave the batch")
        assert not gate.reached[3].is_set()
    assert_recovered(fresh_server, runner)


def test_cancelled_call_leaves_the_batch(fresh_server, runner):
    """A cancelled call's texts leave the batch within a couple of steps; the server stays healthy."""
    scheduler = fresh_server.running.scheduler
    before = answered("CANCELLED")
    with gate_on(runner, Gate("decoder", at=(1, 3))) as gate, \
            grpc.insecure_channel(fresh_server.address) as ch:
        request = pb.TranslateRequest(texts=TEXTS, options=LONG)
        call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=30)
        gate.wait_held()
        assert call.cancel()
        wait_until(lambda: answered("CANCELLED") == before + 1, "the server to see the cancel")
        gate.release(1)
        wait_until(lambda: scheduler.active_sequences == 0, "the texts to leave the batch")
        assert not gate.reached[3].is_set()
    assert call.cancelled()
    assert_recovered(fresh_server, runner)


def test_queue_full_is_resource_exhausted(tiny_bundle, runner):
    """With one row and a queue of 2, further calls are RESOURCE_EXHAUSTED; accepted ones finish."""
    config = server_config(tiny_bundle, max_batch_size=1, queue_size=2)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as ch:
        stub = pb_grpc.TranslatorStub(ch)
        request = pb.TranslateRequest(texts=[TEXTS[2]], options=SHORT)
        with gate_on(runner, Gate()) as gate:
            first = stub.Translate.future(request, timeout=30)
            gate.wait_held()  # the one batch row is taken; the queue holds 2 texts
            queued = [stub.Translate.future(request, timeout=30) for _ in range(2)]
            wait_until(lambda: srv.running.scheduler.queue_depth == 2, "two calls queued")
            with ThreadPoolExecutor(4) as pool:
                rejected = list(pool.map(lambda _: stub.Translate.future(request, timeout=30).exception(20),
                                         range(4)))
        assert [e.code() for e in rejected] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
        assert all("queue" in e.details() for e in rejected)
        want = best_tokens(runner, TEXTS[2], DecodeOptions(max_output_tokens=10))
        for call in [first, *queued]:
            assert list(call.result(timeout=30).results[0].hypotheses[0].token_ids) == want
        assert_recovered(srv, runner)


def test_failing_batch_is_internal_and_the_server_keeps_serving(fresh_server, runner):
    """An injected decoder failure is INTERNAL for its batch; the next call succeeds."""
    fail_once = Gate(None, fail=lambda stage, n: stage == "decoder" and n == 1)
    with gate_on(runner, fail_once), grpc.insecure_channel(fresh_server.address) as ch, \
            pytest.raises(grpc.RpcError) as err:
        request = pb.TranslateRequest(texts=TEXTS[:2], options=SHORT)
        pb_grpc.TranslatorStub(ch).Translate(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INTERNAL and "decoder step failed" in err.value.details()
    assert "injected" not in err.value.details() and "error id" in err.value.details()  # text: in the log
    assert_recovered(fresh_server, runner)


def test_drain_finishes_in_flight_calls_and_reports_not_serving(fresh_server, runner):
    """stop() turns health NOT_SERVING and lets the in-flight call finish with its full result."""
    with grpc.insecure_channel(fresh_server.address) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=30)
        assert next(watch).status == SERVING
        with gate_on(runner, Gate()) as gate:
            request = pb.TranslateRequest(texts=TEXTS, options=SHORT)
            call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=30)
            gate.wait_held()
            stopper = threading.Thread(target=fresh_server.stop, args=(20.0,))
            stopper.start()
            assert next(watch).status == NOT_SERVING
            assert not call.done()  # NOT_SERVING while the call is still in flight: draining
            watch.cancel()
        results = call.result(timeout=30).results
        stopper.join(30)
    assert not stopper.is_alive()
    want = [best_tokens(runner, t, DecodeOptions(max_output_tokens=10)) for t in TEXTS]
    assert [list(r.hypotheses[0].token_ids) for r in results] == want


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_in_flight_stream_and_exits_zero(tiny_bundle, tmp_path, runner, sig):
    """SIGTERM / SIGINT while a stream is generating (each decoder step slowed down): health turns
    NOT_SERVING while the stream is still in flight, the stream completes, the process exits 0."""
    with slow_server(tiny_bundle, tmp_path, "--drain-grace-s", "30", step_s=0.02) as (server, port), \
            grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=60)
        assert next(watch).status == SERVING
        options = pb.TranslateOptions(max_output_tokens=40)
        request = pb.TranslateStreamRequest(text=TEXTS[3], options=options)
        stream = pb_grpc.TranslatorStub(ch).TranslateStream(request, timeout=60)
        first = next(stream)
        assert first.HasField("piece")  # the call is in flight
        server.proc.send_signal(sig)
        assert next(watch).status == NOT_SERVING and server.alive()  # health says so while draining,
        watch.cancel()
        rest = list(stream)  # and the stream in flight completes
        assert len(rest) > 1, "the text was decoded before the signal came: nothing was left to drain"
        assert server.exit_code() == 0, server.logs()
    logs = server.logs()
    assert f"listening on 127.0.0.1:{port}" in logs and "draining" in logs and "Traceback" not in logs
    final = rest[-1].result.hypotheses[0]
    assert "".join(m.piece.text for m in [first, *rest[:-1]]) == final.text
    assert list(final.token_ids) == best_tokens(runner, TEXTS[3], DecodeOptions(max_output_tokens=40))


def test_bad_bundle_exits_non_zero_with_a_message(tmp_path):
    """A missing bundle: exit code 2 and a message saying what to pass."""
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "service.server", "--bundle", str(missing), "--port", "0"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "bundle directory not found" in proc.stderr and "--bundle" in proc.stderr


def test_a_required_provider_that_is_not_in_use_fails_start_up(tiny_bundle):
    """--require-provider names a provider that is not the one running the model: exit code 3 and a
    message saying which provider ran instead (no silent CPU fallback)."""
    if cuda_unavailable() is None:
        pytest.skip("this machine runs the CUDA provider")
    env_flag = {"TRANSLATOR_REQUIRE_PROVIDER": "CUDAExecutionProvider"}
    command = [sys.executable, "-m", "service.server", "--bundle", str(tiny_bundle), "--port", "0",
               "--metrics-port", "-1"]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env_flag})
    assert proc.returncode == 3, proc.stderr
    assert "CUDAExecutionProvider is required" in proc.stderr and "CPUExecutionProvider" in proc.stderr
