"""The real `python -m service.server` process: SIGTERM under full load drains cleanly (every call
finishes or gets UNAVAILABLE within the grace period, exit code 0), and a missing, truncated,
tampered or unloadable bundle stops it at start-up with a clear message and a non-zero exit code
before it ever listens."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.bundle import file_sha256
from service.runtime.runner import Runner
from tests.support import REPO_ROOT
from tests.support.decoding import reference
from tests.support.deploy import free_port
from tests.support.polling import wait_for, wait_until
from tests.support.server import NOT_SERVING, TEXTS, scrape

GRACE_S = 2.0
CALLS = 24
# The real entry point, every decoder step slowed down (by SLOW_STEP_S seconds): the server is
# surely busy when SIGTERM comes.
SLOW_SERVER = """
import os, sys, time
from service.runtime.backends import HostBackend
run = HostBackend.decode
pause = float(os.environ.get("SLOW_STEP_S", "0.01"))
def slow(self, *args, **kwargs):
    time.sleep(pause)
    return run(self, *args, **kwargs)
HostBackend.decode = slow
from service.server import main
sys.exit(main(sys.argv[1:]))
"""


def start(bundle: Path, tmp_path: Path, *extra: str, code: str = SLOW_SERVER,
          step_s: float = 0.01) -> tuple[subprocess.Popen, int]:
    """A server subprocess on a free loopback port; (process, port) once it serves."""
    port_file = tmp_path / "port"
    args = ["--bundle", str(bundle), "--port", "0", "--port-file", str(port_file), "--metrics-port", "-1",
            "--providers", "CPUExecutionProvider", *extra]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SLOW_STEP_S": str(step_s)})
    assert wait_until(lambda: port_file.exists() or proc.poll() is not None, timeout=120), "no port file"
    assert proc.poll() is None, proc.communicate()[1]
    return proc, int(port_file.read_text())


async def load_then_signal(port: int, metrics_port: int, proc: subprocess.Popen,
                           sig: signal.Signals) -> tuple[list, float, list[int]]:
    """CALLS concurrent calls (unary and streams), the signal once all are in; [(kind, code, message,
    tokens)], the seconds from the signal to the last answer, and the health statuses seen after it."""
    async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.TranslatorStub(channel)
        options = pb.TranslateOptions(max_output_tokens=60)
        first_piece = asyncio.Event()

        async def unary(text: str) -> tuple:
            try:
                reply = await stub.Translate(pb.TranslateRequest(texts=[text], options=options), timeout=60)
                return "unary", "OK", "", list(reply.results[0].hypotheses[0].token_ids)
            except aio.AioRpcError as exc:
                return "unary", exc.code().name, exc.details(), None

        async def stream(text: str) -> tuple:
            tokens = []
            try:
                request = pb.TranslateStreamRequest(text=text, options=options)
                async for message in stub.TranslateStream(request, timeout=60):
                    first_piece.set()
                    if message.HasField("result"):
                        return "stream", "OK", "", list(message.result.hypotheses[0].token_ids)
                    tokens.append(message.piece.token_id)
                return "stream", "NO RESULT", "", tokens
            except aio.AioRpcError as exc:
                return "stream", exc.code().name, exc.details(), None

        calls = [asyncio.ensure_future((stream if i % 3 == 0 else unary)(TEXTS[i % len(TEXTS)]))
                 for i in range(CALLS)]
        await asyncio.wait_for(first_piece.wait(), 60)

        def all_in() -> bool:
            """Every call is queued, decoding or answered (the server's gauges and our own count)."""
            gauges = scrape(metrics_port)
            answered = sum(c.done() for c in calls)
            held = gauges["translator_queue_depth"] + gauges["translator_active_sequences"]
            return held + answered >= CALLS

        await asyncio.to_thread(wait_for, all_in, 60, "every call to reach the server")
        proc.send_signal(sig)
        signalled = time.monotonic()
        health, statuses = health_pb2_grpc.HealthStub(channel), []
        for _ in range(500):  # bounded: the server turns NOT_SERVING once it has handled the signal
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            except aio.AioRpcError:
                break
            statuses.append(reply.status)
            if reply.status == NOT_SERVING:
                break
        late = await unary(TEXTS[0])  # a call after the signal is refused
        results = await asyncio.gather(*calls)
        return [*results, late], time.monotonic() - signalled, statuses


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_under_load_answers_every_call_and_exits_zero(tiny_bundle, tmp_path, sig):
    """Health turns NOT_SERVING at once; each call either completes with the right tokens or gets
    UNAVAILABLE with a clear message, all within the grace period (plus the server's margin); the
    process exits 0."""
    runner = Runner(tiny_bundle, providers=["CPUExecutionProvider"])
    # One text at a time, each decoder step slowed so that the longest text takes half the grace
    # period: the first calls finish within it, while all CALLS together take several times longer.
    steps = [len(reference(runner, t, DecodeOptions(max_new_tokens=60))[0]) + 1 for t in TEXTS]
    step_s = GRACE_S / 2 / max(steps)
    assert CALLS * min(steps) * step_s > 2 * GRACE_S
    metrics_port = free_port()
    proc, port = start(tiny_bundle, tmp_path, "--max-batch-size", "1", "--drain-grace-s", str(GRACE_S),
                       "--metrics-port", str(metrics_port), step_s=step_s)
    try:
        answers, seconds, statuses = asyncio.run(
            asyncio.wait_for(load_then_signal(port, metrics_port, proc, sig), 120))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "draining" in err and "Traceback" not in err
    assert statuses and statuses[-1] == NOT_SERVING, statuses  # health said so while draining
    codes = [code for _, code, _, _ in answers]
    assert set(codes) <= {"OK", "UNAVAILABLE"}, answers
    assert "OK" in codes[:-1] and "UNAVAILABLE" in codes[:-1]  # some finished in the grace period, some not
    assert codes[-1] == "UNAVAILABLE" and "shutting down" in answers[-1][2]  # the call made after SIGTERM
    assert seconds < GRACE_S + 2.0 + 5.0  # grace + the server's margin + slack for a loaded machine
    for i, (_, code, message, tokens) in enumerate(answers[:-1]):
        if code == "OK":
            assert tokens == reference(runner, TEXTS[i % len(TEXTS)], DecodeOptions(max_new_tokens=60))[0]
        else:
            assert "the server shut down" in message, message


def broken_bundles(bundle: Path, root: Path) -> dict[str, tuple[Path, str]]:
    """Copies of the bundle broken in each way, with the phrase the error must contain."""
    def copy(name: str) -> Path:
        out = root / name
        shutil.copytree(bundle, out)
        return out

    cases = {"missing": (root / "nowhere", "bundle directory not found")}
    gone = copy("missing-file")
    (gone / "decoder.onnx").unlink()
    cases["missing file"] = (gone, "decoder.onnx is missing")
    short = copy("truncated")
    data = (short / "encoder.onnx").read_bytes()
    (short / "encoder.onnx").write_bytes(data[: len(data) // 2])
    cases["truncated"] = (short, "encoder.onnx is truncated")
    flipped = copy("tampered")
    data = bytearray((flipped / "decoder.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (flipped / "decoder.onnx").write_bytes(bytes(data))
    cases["hash mismatch"] = (flipped, "sha256 mismatch")
    manifest = copy("bad-json")
    (manifest / "bundle.json").write_text("{not json", encoding="utf-8")
    cases["bad manifest"] = (manifest, "not valid JSON")
    garbage = copy("unloadable")  # hashes match, but the file is no ONNX model
    (garbage / "encoder.onnx").write_bytes(b"not an onnx model" * 100)
    meta = json.loads((garbage / "bundle.json").read_text(encoding="utf-8"))
    meta["files"]["encoder.onnx"] = {"sha256": file_sha256(garbage / "encoder.onnx"), "bytes": 1700}
    (garbage / "bundle.json").write_text(json.dumps(meta), encoding="utf-8")
    cases["unloadable model"] = (garbage, "cannot load the model")
    return cases


@pytest.fixture(scope="module")
def broken(tiny_bundle, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """The broken bundles, made once."""
    return broken_bundles(tiny_bundle, tmp_path_factory.mktemp("broken"))


@pytest.mark.parametrize("case", ["missing", "missing file", "truncated", "hash mismatch", "bad manifest",
                                  "unloadable model"])
def test_bad_bundle_fails_at_start_up(broken, case, tmp_path):
    """`python -m service.server --bundle BAD`: exit code 2, one clear line, no traceback, never listens."""
    path, phrase = broken[case]
    port_file = tmp_path / "port"
    proc = subprocess.run([sys.executable, "-m", "service.server", "--bundle", str(path), "--port", "0",
                           "--port-file", str(port_file), "--metrics-port", "-1",
                           "--providers", "CPUExecutionProvider"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert phrase in proc.stderr and "--bundle" in proc.stderr
    assert "Traceback" not in proc.stderr and not port_file.exists() and "listening" not in proc.stdout

