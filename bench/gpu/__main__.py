"""GPU benchmark of `make gpu-check`: the engine and the server on CUDA; the last line is one JSON object.

Engine (in this process, greedy to eos, static batches of 1 / 32 / 128 held-out sentences, median
of `repeats` timed runs after a warm-up): the runner on the CUDA provider with the bundle's fp16
variant (what the server picks for CUDA) and with its fp32 base files (`variant="base"`: ONNX
Runtime has no fp32 CUDA kernel for its GroupQueryAttention nodes, so it places them on the CPU
with copies around them; the figure says what that costs), and CTranslate2 on CUDA beside them
(float16 and float32) when its CUDA build loads here. fp16 tokens are compared with fp32's.
Server: `python -m service.server` with default flags (it must report CUDA), loaded by the closed loop of
bench/common/loadgen.py at concurrency 1 and 64.

    python -m bench.gpu [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.loadgen import summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at, wait_ready
from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, REPO_ROOT, held_out_sources
from service.domain.types import DecodeOptions
from service.runtime.model.sessions import CUDA
from service.runtime.runner import Runner

CHECKPOINT = REPO_ROOT / "artifacts" / "default" / "model.pt"
BATCHES = (1, 32, 128)
Decode = Callable[[list[list[int]]], list[list[int]]]


def device_name() -> str:
    """The GPU's name as nvidia-smi prints it ("" without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def runner_decoder(runner: Runner) -> Decode:
    """Greedy decoding of a static batch by a runner."""
    options = DecodeOptions(max_output_tokens=runner.max_len - 1)
    return lambda batch: [h[0].tokens for h in runner.translate(batch, options, max_rows=len(batch))]


def ct2_decoders(limit: int, work: Path) -> tuple[dict[str, Decode], str]:
    """CTranslate2 on CUDA in float16 and float32 (the same weights), or none and why."""
    try:
        import ctranslate2

        from bench.engines.ct2 import CT2Engine, checkpoint_vocab, convert
        if ctranslate2.get_cuda_device_count() < 1:
            return {}, "ctranslate2 sees no CUDA device (its wheel is built for another CUDA major?)"
        vocab = checkpoint_vocab(CHECKPOINT)
        model = convert(CHECKPOINT, work / "ct2", vocab)
        engines = {f"ct2_{t}": CT2Engine(model, vocab, 1, "cuda", t) for t in ("float16", "float32")}
    except Exception as exc:  # noqa: BLE001 - optional: report why and go on
        return {}, f"{type(exc).__name__}: {exc}"
    return {name: (lambda batch, e=e: e.greedy(batch, limit)) for name, e in engines.items()}, ""


def time_decoder(decode: Decode, sources: list[list[int]], batch: int, repeats: int
                 ) -> tuple[float, list[list[int]]]:
    """Median sentences per second over `repeats` runs (after one warm-up), and the outputs."""
    decode(sources[:batch])
    seconds, out = [], []
    for _ in range(repeats):
        start, out = time.perf_counter(), []
        for i in range(0, len(sources), batch):
            out += decode(sources[i : i + batch])
        seconds.append(time.perf_counter() - start)
    return len(sources) / statistics.median(seconds), out


def engine(quick: bool, bundle: Path) -> dict[str, Any]:
    """Sentences per second of every decoder at every batch size, and fp16/fp32 token agreement."""
    fp16 = Runner(bundle, require_provider=CUDA)  # the default choice for CUDA: the fp16 variant
    fp32 = Runner(bundle, variant="base")
    texts = held_out_sources(HELD_OUT)
    ids = fp16.encode_texts(texts)
    limit = fp16.max_len - 1
    result: dict[str, Any] = {"variant": fp16.variant_name, "provider": fp16.provider}
    with tempfile.TemporaryDirectory() as work:
        ct2, why = ct2_decoders(limit, Path(work))
        decoders = {"ort_fp16": runner_decoder(fp16), "ort_fp32": runner_decoder(fp32), **ct2}
        if why:
            result["ct2_skipped"] = why
        same = total = 0
        for batch in BATCHES:
            n = max(batch * (2 if quick else 4), 32 if quick else 64)
            sources = (ids * (n // len(ids) + 1))[:n]
            outputs = {}
            for name, decode in decoders.items():
                rate, outputs[name] = time_decoder(decode, sources, batch, 2 if quick else 3)
                result.setdefault(name, {})[f"b{batch}"] = round(rate, 1)
            same += sum(a == b for a, b in zip(outputs["ort_fp16"], outputs["ort_fp32"], strict=True))
            total += len(sources)
    result["fp16_vs_fp32_token_agreement"] = round(same / total, 4)
    for batch in BATCHES:
        ours = result["ort_fp16"][f"b{batch}"]
        result[f"fp16_vs_fp32_b{batch}"] = round(ours / result["ort_fp32"][f"b{batch}"], 2)
        if "ct2_float16" in result:
            result[f"fp16_vs_ct2_fp16_b{batch}"] = round(ours / result["ct2_float16"][f"b{batch}"], 2)
    return result


def server(quick: bool, bundle: Path) -> dict[str, Any]:
    """Throughput and latency of a default-flag server at concurrency 1 and 64 (it must run on CUDA)."""
    texts = held_out_sources(HELD_OUT)
    out: dict[str, Any] = {}
    with ServerProcess(bundle, "continuous", ("--require-provider", CUDA)) as proc:
        asyncio.run(wait_ready(proc.address))
        for concurrency in (1, 64):
            requests = (100 if quick else 300) if concurrency == 1 else (640 if quick else 1920)
            warm_up = min(requests, 2 * concurrency)
            asyncio.run(closed_loop_at(proc.address, texts, concurrency, warm_up))
            summary = summarize(asyncio.run(closed_loop_at(proc.address, texts, concurrency, requests)))
            if summary.ok != requests:
                raise RuntimeError(f"server answered {summary.ok} of {requests}: {summary.errors}")
            out[f"c{concurrency}"] = {"throughput": round(summary.throughput, 1),
                                      "p50_ms": round(summary.p50_ms, 2), "p99_ms": round(summary.p99_ms, 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: run both parts, print the JSON line; exit 1 unless the model ran on CUDA."""
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sentences and requests")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    report: dict[str, Any] = {"device": device_name()}
    report["engine"] = engine(args.quick, args.bundle)
    print(json.dumps(report["engine"]), file=sys.stderr)
    report["server"] = server(args.quick, args.bundle)
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
