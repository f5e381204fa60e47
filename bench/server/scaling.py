"""Scaling and memory: throughput and latency against source length and batch size, server RSS.

    python -m bench.server.scaling [--quick] [--bundle DIR] [--intra-op-threads N] [--json FILE] [--out DIR]

1. Source length (in-process `Runner.translate`): sources of exactly 16 .. 256 tokens (capped at
   the bundle's max_len) built by joining held-out sentences; latency of one source alone, and
   throughput of a batch decoded together.
2. Batch size (in-process): held-out sentences decoded `b` at a time (b = 1 .. 64).
3. Memory: a continuous-batching server (`python -m service.server`) under closed-loop load of
   the mixed workload; VmRSS sampled every `rss_every` requests after a warm-up chunk, the drift
   between the first and the last sample in %, and the peak (VmHWM).
`run(quick, bundle)` prints the tables and returns the headline figures; with `out` it also writes the
memory run's RSS samples to `<out>/scaling-rss.json` and draws them beside it (warm-up marked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.charts import from_results, record
from bench.common.loadgen import summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at
from bench.common.workload import (
    DEFAULT_BUNDLE,
    HELD_OUT,
    Lengths,
    held_out_sources,
    mixed_texts,
    sources_of_length,
)


@dataclass(frozen=True)
class Plan:
    """What one scaling run measures (full mode by default; see QUICK)."""

    lengths: tuple[int, ...] = (16, 32, 64, 128, 256)
    alone: int = 8  # sources decoded one at a time per length
    together: int = 32  # sources decoded as one batch per length
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    batch_sentences: int = 128  # sentences per batch-size point (at least one batch)
    rss_requests: int = 10_000  # after the warm-up chunk
    rss_every: int = 1_000
    rss_concurrency: int = 64
    max_batch_size: int = 64
    intra_op_threads: int = 0
    seed: int = 0


QUICK = Plan(lengths=(16, 64, 256), alone=3, together=16, batch_sizes=(1, 8, 64), batch_sentences=64,
             rss_requests=2_000, rss_every=250)


@dataclass
class Point:
    """One in-process measurement."""

    label: int  # source length or batch size
    sentences: int
    seconds: float
    out_tokens: int
    latency_ms: float  # p50 per source alone (length sweep) or per batch (batch sweep)

    @property
    def throughput(self) -> float:
        """Sentences per second."""
        return self.sentences / self.seconds

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second."""
        return self.out_tokens / self.seconds


def _decode(runner, inputs: list, max_rows: int) -> tuple[float, int]:
    """Seconds and output tokens of one Runner.translate call."""
    t0 = time.perf_counter()
    hyps = runner.translate(inputs, max_rows=max_rows)
    return time.perf_counter() - t0, sum(len(h[0].tokens) for h in hyps)


def length_sweep(runner, plan: Plan, sources: list[str], lengths: Lengths) -> list[tuple[Point, Point]]:
    """Per source length: (one source at a time, a batch of `together` sources)."""
    out = []
    for tokens in sorted({min(t, lengths.max_len) for t in plan.lengths}):
        ids = sources_of_length(sources, tokens, plan.alone + plan.together, lengths, plan.seed)
        runner.translate(ids[:1])  # warm-up at this shape
        alone = [_decode(runner, [x], 1) for x in ids[: plan.alone]]
        seconds, out_tokens = sum(a for a, _ in alone), sum(n for _, n in alone)
        p50 = 1e3 * statistics.median(a for a, _ in alone)
        batch = ids[plan.alone:]
        b_seconds, b_tokens = _decode(runner, batch, plan.max_batch_size)
        out.append((Point(tokens, len(alone), seconds, out_tokens, p50),
                    Point(tokens, len(batch), b_seconds, b_tokens, 1e3 * b_seconds)))
    return out


def batch_sweep(runner, plan: Plan, sources: list[str]) -> list[Point]:
    """Per batch size b: held-out sentences decoded b at a time (each batch to completion)."""
    out = []
    runner.translate(sources[:8], max_rows=8)  # warm-up
    for b in plan.batch_sizes:
        n = max(b, plan.batch_sentences // b * b)
        chunks = [sources[i: i + b] for i in range(0, n, b)]
        timed = [_decode(runner, chunk, b) for chunk in chunks]
        seconds = sum(t for t, _ in timed)
        p50 = 1e3 * statistics.median(t for t, _ in timed)
        out.append(Point(b, n, seconds, sum(k for _, k in timed), p50))
    return out


def rss_run(plan: Plan, bundle: Path, texts: list[str], log=print) -> dict[str, float | list[float]]:
    """RSS of a continuous server sampled every rss_every requests after one warm-up chunk."""
    args = ["--max-batch-size", str(plan.max_batch_size), "--intra-op-threads", str(plan.intra_op_threads)]
    samples, answered, errors = [], 0, 0
    with ServerProcess(bundle, "continuous", args) as server:
        started = server.rss_kib() / 1024
        chunks = plan.rss_requests // plan.rss_every + 1  # + the warm-up chunk
        t0 = time.perf_counter()
        for k in range(chunks):
            shift = (k * plan.rss_every) % len(texts)
            rotated = texts[shift:] + texts[:shift]  # every chunk starts at the next texts
            records = asyncio.run(closed_loop_at(server.address, rotated, plan.rss_concurrency,
                                                 plan.rss_every))
            s = summarize(records)
            if k:
                answered, errors = answered + s.ok, errors + s.requests - s.ok
            samples.append(server.rss_kib() / 1024)
            log(f"  rss after {(k + 1) * plan.rss_every} requests: {samples[-1]:.1f} MiB")
        seconds = time.perf_counter() - t0
        peak = server.peak_rss_kib() / 1024
    measured = samples[1:] if len(samples) > 1 else samples
    slope = float(np.polyfit(np.arange(len(measured)), measured, 1)[0]) if len(measured) > 1 else 0.0
    return {"started_mib": started, "warm_mib": measured[0], "last_mib": measured[-1], "peak_mib": peak,
            "drift_pct": 100.0 * (measured[-1] - measured[0]) / measured[0],
            "slope_mib_per_1000": slope * 1000 / plan.rss_every,
            "requests": float(plan.rss_requests), "answered": float(answered), "errors": float(errors),
            "seconds": seconds, "samples": samples}


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = [header, ["---"] * len(header), *rows]
    return "".join("| " + " | ".join(cells) + " |\n" for cells in lines)


def tables(lengths: list[tuple[Point, Point]], batches: list[Point], rss: dict, plan: Plan) -> str:
    """The markdown tables of a run."""
    length_rows = [[str(a.label), f"{a.latency_ms:.1f}", f"{a.out_tokens / a.sentences:.0f}",
                    f"{1e3 / a.tokens_per_s:.2f}", f"{a.tokens_per_s:.0f}", f"{b.throughput:.1f}",
                    f"{b.tokens_per_s:.0f}", f"{b.tokens_per_s / a.tokens_per_s:.2f}"] for a, b in lengths]
    together = plan.together
    header = ["source tokens", "alone: p50 ms", "output tokens (mean)", "alone: ms per output token",
              "alone: tokens/s", f"{together} together: sentences/s", f"{together} together: tokens/s",
              "together / alone (tokens/s)"]
    length_table = _table(header, length_rows)
    base = batches[0].tokens_per_s if batches else float("nan")
    batch_table = _table(["batch size", "sentences", "sentences/s", "tokens/s", "p50 ms per batch",
                          "tokens/s vs first row"],
                         [[str(p.label), str(p.sentences), f"{p.throughput:.1f}", f"{p.tokens_per_s:.0f}",
                           f"{p.latency_ms:.0f}", f"{p.tokens_per_s / base:.2f}"] for p in batches])
    samples = ", ".join(f"{s:.0f}" for s in rss["samples"])
    rss_table = _table(["figure", "value"], [
        ["requests measured (after a warm-up chunk of the same size)", f"{rss['requests']:.0f}"],
        ["answered / errors", f"{rss['answered']:.0f} / {rss['errors']:.0f}"],
        ["RSS after start-up MiB", f"{rss['started_mib']:.0f}"],
        ["RSS after warm-up MiB", f"{rss['warm_mib']:.1f}"],
        ["RSS at the end MiB", f"{rss['last_mib']:.1f}"],
        ["drift (end vs after warm-up) %", f"{rss['drift_pct']:+.2f}"],
        ["linear trend MiB per 1,000 requests", f"{rss['slope_mib_per_1000']:+.2f}"],
        ["peak RSS (VmHWM) MiB", f"{rss['peak_mib']:.0f}"],
        [f"samples every {plan.rss_every} requests MiB", samples],
    ])
    return (f"### Source length (in-process)\n\n{length_table}\n"
            f"### Batch size (in-process)\n\n{batch_table}\n"
            f"### Server memory under load (continuous, concurrency {plan.rss_concurrency})\n\n{rss_table}")


def run_plan(plan: Plan, bundle: Path, sources: list[str], log=print,
             out: Path | None = None) -> tuple[dict[str, float], str]:
    """Measure the plan (the memory run's record and chart into `out`); headline figures and the tables."""
    from service.runtime.runner import Runner

    lengths = Lengths(bundle)
    singles = [s for s in sources if lengths(s) <= lengths.max_len]
    runner = Runner(bundle, intra_op_threads=plan.intra_op_threads)
    by_length = length_sweep(runner, plan, sources, lengths)
    log("length sweep done")
    by_batch = batch_sweep(runner, plan, singles)
    log("batch sweep done")
    del runner
    texts = mixed_texts(sources, 2000, lengths, plan.seed)
    rss = rss_run(plan, bundle, texts, log)
    if out is not None:
        record.write(out, "scaling-rss", "rss", from_results.scaling_rss(rss, plan.rss_every))
    scores: dict[str, float] = {k: float(v) for k, v in rss.items() if k != "samples"}
    scores = {f"rss_{k}": v for k, v in scores.items()}
    for a, b in by_length:
        scores[f"len{a.label}_alone_p50_ms"] = a.latency_ms
        scores[f"len{a.label}_together_tokens_per_s"] = b.tokens_per_s
    for p in by_batch:
        scores[f"batch{p.label}_tokens_per_s"] = p.tokens_per_s
    if len(by_batch) > 1:
        scores["batch_max_vs_1_tokens_per_s"] = by_batch[-1].tokens_per_s / by_batch[0].tokens_per_s
    return scores, tables(by_length, by_batch, rss, plan)


def run(quick: bool = False, bundle: Path = DEFAULT_BUNDLE, intra_op_threads: int = 0,
        sources: Path = HELD_OUT, out: Path | None = None) -> dict[str, float]:
    """The scaling and memory benchmark (prints its tables); figures by name."""
    plan = replace(QUICK if quick else Plan(), intra_op_threads=intra_op_threads)
    scores, text = run_plan(plan, Path(bundle), held_out_sources(sources), log=_progress, out=out)
    print(text, flush=True)
    return scores


def _progress(message: str) -> None:
    """Progress lines on stderr (the tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.server.scaling",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points and requests (~2 minutes)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="model bundle directory")
    parser.add_argument("--sources", type=Path, default=HELD_OUT, help="TSV whose first column is used")
    parser.add_argument("--intra-op-threads", type=int, default=0, help="ORT threads (in-process and server)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--out", type=Path, help="write scaling-rss.json and its chart here")
    args = parser.parse_args(argv)
    scores = run(args.quick, args.bundle, args.intra_op_threads, args.sources, args.out)
    if args.json:
        args.json.write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
