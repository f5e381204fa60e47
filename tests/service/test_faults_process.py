"""The real `python -m service.server` process: SIGTERM under full load drains cleanly (every call,
gRPC or HTTP, finishes or gets UNAVAILABLE / 503 within the grace period, exit code 0), and a
missing, truncated, tampered or unloadable bundle stops it at start-up with a clear message and a
non-zero exit code before it ever listens."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.model.bundle import file_sha256
from tests.support import REPO_ROOT
from tests.support.decoding import best_texts, best_tokens
from tests.support.metrics import key, scrape
from tests.support.polling import wait_until
from tests.support.server import NOT_SERVING, SERVING, TEXTS, ServerProcess, free_port, slow_server

GRACE_S = 2.0
CALLS = 24


async def load_then_signal(port: int, http_port: int, metrics_port: int, server: ServerProcess,
                           sig: signal.Signals) -> tuple[list, float, list[int], int]:
    """CALLS concurrent calls (gRPC unary and streams, HTTP generate), the signal once all are in;
    [(kind, code, message, tokens or text)], the seconds from the signal to the last answer, the health
    statuses a Watch saw (from before the signal until NOT_SERVING), and how many calls were unanswered
    at NOT_SERVING."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aio.insecure_channel(f"127.0.0.1:{port}") as channel, \
            aiohttp.ClientSession(timeout=timeout) as session:
        stub = pb_grpc.TranslatorStub(channel)
        options = pb.TranslateOptions(max_output_tokens=60)
        first_piece = asyncio.Event()

        async def unary(text: str) -> tuple:
            try:
                reply = await stub.Translate(pb.TranslateRequest(texts=[text], options=options), timeout=60)
                return "unary", "OK", "", list(reply.results[0].hypotheses[0].token_ids)
            except aio.AioRpcError as exc:
                return "unary", exc.code().name, exc.details(), None

        async def http(text: str) -> tuple:
            url = f"http://127.0.0.1:{http_port}/v2/models/translator/generate"
            async with session.post(url, json={"text_input": text, "max_tokens": 60}) as answer:
                body = await answer.json()
            if answer.status == 200:
                return "http", "OK", "", body["text_output"]
            return "http", "UNAVAILABLE" if answer.status == 503 else str(answer.status), body["error"], None

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

        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
        statuses = [(await watch.read()).status]
        kinds = (stream, http, unary)
        calls = [asyncio.ensure_future(kinds[i % 3](TEXTS[i % len(TEXTS)])) for i in range(CALLS)]
        await asyncio.wait_for(first_piece.wait(), 60)

        def all_in() -> bool:
            """Every call is queued, decoding or answered (the server's gauges and our own count)."""
            gauges = scrape(metrics_port)
            answered = sum(c.done() for c in calls)
            model = {"model": "translator", "version": "1"}  # the --bundle server's one model
            held = sum(gauges[key(f"translator_{g}", **model)] for g in ("queue_depth", "active_sequences"))
            return held + answered >= CALLS

        await asyncio.to_thread(wait_until, all_in, "every call to reach the server", 60, 0.1)
        server.proc.send_signal(sig)
        signalled = time.monotonic()
        while statuses[-1] != NOT_SERVING:  # bounded by the Watch's timeout
            statuses.append((await watch.read()).status)
        unanswered = sum(not c.done() for c in calls)
        watch.cancel()
        late = [await unary(TEXTS[0]), await http(TEXTS[0])]  # calls after the signal are refused
        results = await asyncio.gather(*calls)
        return [*results, *late], time.monotonic() - signalled, statuses, unanswered


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_under_load_answers_every_call_and_exits_zero(tiny_bundle, tmp_path, runner, sig):
    """Health turns NOT_SERVING at once, while calls are still in flight; each call, gRPC or HTTP,
    either completes with the right tokens (text over HTTP) or gets UNAVAILABLE (HTTP 503) with a clear
    message, all within the grace period (plus the server's margin); the process exits 0."""
    # One text at a time, each decoder step slowed so that the longest text takes half the grace
    # period: the first calls finish within it, while all CALLS together take several times longer.
    want = [best_tokens(runner, t, DecodeOptions(max_output_tokens=60)) for t in TEXTS]
    steps = [len(tokens) + 1 for tokens in want]
    step_s = GRACE_S / 2 / max(steps)
    assert CALLS * min(steps) * step_s > 2 * GRACE_S
    texts = [best_texts(runner, [t], DecodeOptions(max_output_tokens=60))[0] for t in TEXTS]
    metrics_port, http_port = free_port(), free_port()
    with slow_server(tiny_bundle, tmp_path, "--max-batch-size", "1", "--drain-grace-s", str(GRACE_S),
                     "--metrics-port", str(metrics_port), "--http-port", str(http_port),
                     step_s=step_s) as (server, port):
        answers, seconds, statuses, unanswered = asyncio.run(
            asyncio.wait_for(load_then_signal(port, http_port, metrics_port, server, sig), 120))
        assert server.exit_code() == 0, server.logs()
    logs = server.logs()
    assert "draining" in logs and "Traceback" not in logs
    assert statuses == [SERVING, NOT_SERVING], statuses  # health said so after the signal ...
    assert unanswered > 0  # ... while calls were still in flight: draining
    codes = [code for _, code, _, _ in answers]
    assert set(codes) <= {"OK", "UNAVAILABLE"}, answers
    assert "OK" in codes[:-2] and "UNAVAILABLE" in codes[:-2]  # some finished in the grace period, some not
    assert "http" in {kind for kind, _, _, _ in answers[:-2]}, answers  # HTTP calls were in the load
    for _, code, message, _ in answers[-2:]:  # the calls made after the signal, gRPC then HTTP
        assert code == "UNAVAILABLE" and "shutting down" in message, answers[-2:]
    assert seconds < GRACE_S + 2.0 + 5.0  # grace + the server's margin + slack for a loaded machine
    for i, (kind, code, message, result) in enumerate(answers[:-2]):
        if code == "OK":
            assert result == (texts if kind == "http" else want)[i % len(TEXTS)]
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

