"""Server behaviour over time: deadlines, cancellation, a full queue, a failing batch, draining
in-process and on SIGTERM (a real `python -m service.server` process), a bad bundle."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support import REPO_ROOT
from tests.support.decoding import reference
from tests.support.polling import wait_until
from tests.support.server import NOT_SERVING, SERVING, TEXTS, server_config

SHORT = pb.TranslateOptions(max_output_tokens=10)
LONG = pb.TranslateOptions(max_output_tokens=60)


class Gate:
    """A runner fault hook that holds decoder steps: each needs a permit, or the gate opened for good."""

    def __init__(self) -> None:
        """Closed gate, no permits."""
        self.entered, self.release = threading.Event(), threading.Event()
        self._permits = threading.Semaphore(0)

    def __call__(self, stage: str) -> None:
        """Block a decoder step until a permit or the release (bounded waits)."""
        if stage != "decoder":
            return
        self.entered.set()
        for _ in range(400):
            if self.release.is_set() or self._permits.acquire(timeout=0.05):
                return

    def allow(self, steps: int) -> None:
        """Let `steps` more decoder steps run."""
        self._permits.release(steps)


@contextmanager
def gated(runner: Runner) -> Iterator[Gate]:
    """Install a Gate on the runner; always released and removed on exit."""
    gate = Gate()
    runner.fault_hook = gate
    try:
        yield gate
    finally:
        gate.release.set()
        runner.fault_hook = None


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
    assert wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0)
    with grpc.insecure_channel(srv.address) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == SERVING and scheduler.healthy
        request = pb.TranslateRequest(texts=[TEXTS[1]], options=SHORT)
        result = pb_grpc.TranslatorStub(ch).Translate(request, timeout=30).results[0]
    want = reference(runner, TEXTS[1], DecodeOptions(max_new_tokens=10))[0]
    assert list(result.hypotheses[0].token_ids) == want


def test_deadline_exceeded_frees_the_slot(fresh_server, runner):
    """An expired call is DEADLINE_EXCEEDED; its texts leave the batch and the server stays healthy."""
    scheduler = fresh_server.running.scheduler
    before = answered("DEADLINE_EXCEEDED")
    with gated(runner) as gate, grpc.insecure_channel(fresh_server.address) as ch:
        request = pb.TranslateRequest(texts=TEXTS, options=LONG)
        call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=0.5)
        assert gate.entered.wait(20)
        assert scheduler.active_sequences == len(TEXTS)  # decoding, held by the gate
        with pytest.raises(grpc.RpcError) as err:
            call.result(timeout=20)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert wait_until(lambda: answered("DEADLINE_EXCEEDED") == before + 1)  # the server gave up too
        gate.allow(2)  # far fewer steps than the texts need: they leave, they do not finish
        assert wait_until(lambda: scheduler.active_sequences == 0)
    assert_recovered(fresh_server, runner)


def test_cancelled_call_leaves_the_batch(fresh_server, runner):
    """A cancelled call's texts leave the batch within a couple of steps; the server stays healthy."""
    scheduler = fresh_server.running.scheduler
    before = answered("CANCELLED")
    with gated(runner) as gate, grpc.insecure_channel(fresh_server.address) as ch:
        request = pb.TranslateRequest(texts=TEXTS, options=LONG)
        call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=30)
        assert gate.entered.wait(20)
        assert call.cancel()
        assert wait_until(lambda: answered("CANCELLED") == before + 1)  # the server saw the cancel
        gate.allow(2)
        assert wait_until(lambda: scheduler.active_sequences == 0)
    assert call.cancelled()
    assert_recovered(fresh_server, runner)


def test_queue_full_is_resource_exhausted(tiny_bundle, runner):
    """With one row and a queue of 2, further calls are RESOURCE_EXHAUSTED; accepted ones finish."""
    config = server_config(tiny_bundle, max_batch_size=1, queue_size=2)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as ch:
        stub = pb_grpc.TranslatorStub(ch)
        request = pb.TranslateRequest(texts=[TEXTS[2]], options=SHORT)
        with gated(runner) as gate:
            first = stub.Translate.future(request, timeout=30)
            assert gate.entered.wait(20)  # the one batch row is taken; the queue holds 2 texts
            queued = [stub.Translate.future(request, timeout=30) for _ in range(2)]
            assert wait_until(lambda: srv.running.scheduler.queue_depth == 2)
            with ThreadPoolExecutor(4) as pool:
                rejected = list(pool.map(lambda _: stub.Translate.future(request, timeout=30).exception(20),
                                         range(4)))
        assert [e.code() for e in rejected] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
        assert all("queue" in e.details() for e in rejected)
        want = reference(runner, TEXTS[2], DecodeOptions(max_new_tokens=10))[0]
        for call in [first, *queued]:
            assert list(call.result(timeout=30).results[0].hypotheses[0].token_ids) == want
        assert_recovered(srv, runner)


def test_failing_batch_is_internal_and_the_server_keeps_serving(fresh_server, runner):
    """An injected decoder failure is INTERNAL for its batch; the next call succeeds."""
    failures = []

    def fail_once(stage: str) -> None:
        """Raise on the first decoder step only."""
        if stage == "decoder" and not failures:
            failures.append(stage)
            raise RuntimeError("injected decoder failure")

    runner.fault_hook = fail_once
    try:
        with grpc.insecure_channel(fresh_server.address) as ch, pytest.raises(grpc.RpcError) as err:
            request = pb.TranslateRequest(texts=TEXTS[:2], options=SHORT)
            pb_grpc.TranslatorStub(ch).Translate(request, timeout=30)
    finally:
        runner.fault_hook = None
    assert err.value.code() == grpc.StatusCode.INTERNAL and "decoder step failed" in err.value.details()
    assert "injected" not in err.value.details() and "error id" in err.value.details()  # text: in the log
    assert_recovered(fresh_server, runner)


def test_drain_finishes_in_flight_calls_and_reports_not_serving(fresh_server, runner):
    """stop() turns health NOT_SERVING and lets the in-flight call finish with its full result."""
    with grpc.insecure_channel(fresh_server.address) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=30)
        assert next(watch).status == SERVING
        with gated(runner) as gate:
            request = pb.TranslateRequest(texts=TEXTS, options=SHORT)
            call = pb_grpc.TranslatorStub(ch).Translate.future(request, timeout=30)
            assert gate.entered.wait(20)
            stopper = threading.Thread(target=fresh_server.stop, args=(20.0,))
            stopper.start()
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
        results = call.result(timeout=30).results
        stopper.join(30)
    assert not stopper.is_alive()
    want = [reference(runner, t, DecodeOptions(max_new_tokens=10))[0] for t in TEXTS]
    assert [list(r.hypotheses[0].token_ids) for r in results] == want


# The real entry point in a subprocess, each decoder step slowed down so a call is surely in flight.
SLOW_SERVER = """
import sys, time
from service.ops import metrics
from service.runtime.backends import HostBackend
run = HostBackend.decode
def slow(self, *args, **kwargs):
    time.sleep(0.02)
    return run(self, *args, **kwargs)
HostBackend.decode = slow
from service.server import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_in_flight_stream_and_exits_zero(tiny_bundle, tmp_path, runner, sig):
    """SIGTERM / SIGINT while a stream is generating: health turns NOT_SERVING, the stream completes,
    the process exits 0."""
    port_file = tmp_path / "port"
    args = ["--bundle", str(tiny_bundle), "--port", "0", "--port-file", str(port_file),
            "--metrics-port", "-1", "--providers", "CPUExecutionProvider", "--drain-grace-s", "30"]
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVER, *args], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: port_file.exists() or proc.poll() is not None, timeout=120), "no port file"
        assert proc.poll() is None, proc.communicate()[1]
        port = int(port_file.read_text())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            options = pb.TranslateOptions(max_output_tokens=40)
            request = pb.TranslateStreamRequest(text=TEXTS[3], options=options)
            stream = pb_grpc.TranslatorStub(ch).TranslateStream(request, timeout=60)
            first = next(stream)
            assert first.HasField("piece")  # the call is in flight
            proc.send_signal(sig)
            health = health_pb2_grpc.HealthStub(ch)
            check = health_pb2.HealthCheckRequest()
            assert wait_until(lambda: health.Check(check, timeout=5).status == NOT_SERVING, timeout=30)
            rest = list(stream)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"listening on 127.0.0.1:{port}" in out
    assert "draining" in err
    final = rest[-1].result.hypotheses[0]
    assert "".join(m.piece.text for m in [first, *rest[:-1]]) == final.text
    assert list(final.token_ids) == reference(runner, TEXTS[3], DecodeOptions(max_new_tokens=40))[0]


def test_bad_bundle_exits_non_zero_with_a_message(tmp_path):
    """A missing bundle: exit code 2 and a message saying what to pass."""
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "service.server", "--bundle", str(missing), "--port", "0"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "bundle directory not found" in proc.stderr and "--bundle" in proc.stderr
