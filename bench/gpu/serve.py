"""bench.gpu's server part: `python -m service.server` with default flags (on CUDA it must report CUDA), under
bench/common/loadgen.py's closed loop at concurrency 1, 32 and 128, greedy, against CTranslate2 in process
on the same texts in static batches of the same size (its figures include our tokenizer's encoding)."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.common.loadgen import summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at, wait_ready
from bench.gpu.engine import BATCHES, build_decoder, model_job, time_decoder
from bench.gpu.models import Model


def requests_at(concurrency: int, quick: bool) -> int:
    """Requests of the timed run at a concurrency."""
    return (8 if quick else 32) if concurrency == 1 else concurrency * (2 if quick else 4)


def server(model: Model, device: str, ids: list[list[int]], quick: bool,
           concurrencies: tuple[int, ...] = BATCHES) -> dict[str, Any]:
    """Requests per second, p50 and p99 of the server at each concurrency; CTranslate2's sentences per
    second at the same batch size on the same texts; their ratio."""
    from service.runtime.model.sessions import CUDA

    reference = "ct2_float16" if device == "cuda" else "ct2_float32"
    ct2 = build_decoder(reference, model_job(model), device) if model.ct2_dir else None
    args = ("--require-provider", CUDA) if device == "cuda" else ("--providers", "CPUExecutionProvider")
    out: dict[str, Any] = {"reference": reference if ct2 else None}
    with ServerProcess(model.bundle, "continuous", args) as proc:
        asyncio.run(wait_ready(proc.address))
        for c in concurrencies:
            n = requests_at(c, quick)
            texts = (model.texts * (n // len(model.texts) + 1))[:n]
            asyncio.run(closed_loop_at(proc.address, texts, c, min(n, 2 * c), beam_size=1,
                                       max_output_tokens=model.new_tokens or 0))
            summary = summarize(asyncio.run(closed_loop_at(proc.address, texts, c, n, beam_size=1,
                                                           max_output_tokens=model.new_tokens or 0)))
            if summary.ok != n:
                raise RuntimeError(f"server answered {summary.ok} of {n} at concurrency {c}: "
                                   f"{summary.errors}")
            point = {"throughput": round(summary.throughput, 2), "p50_ms": round(summary.p50_ms, 2),
                     "p99_ms": round(summary.p99_ms, 2)}
            if ct2 is not None:
                sources = (ids * (n // len(ids) + 1))[:n]
                rate, _ = time_decoder(ct2, sources, c, 1)
                point |= {"ct2_sentences_per_s": round(rate, 2),
                          "vs_ct2": round(summary.throughput / rate, 2)}
            out[f"c{c}"] = point
    return out
