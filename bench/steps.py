"""Steps per decoder run (`--steps-per-call`): the trade, measured on the engine and the real server.

    python -m bench.steps [--quick] [--bundle DIR] [--steps 1,4,16]

1. Engine, in process: `Runner.translate` of the held-out sentences in static batches of 1, 4 and 32,
   one runner per K, interleaved rounds, medians; the hypotheses of every K are checked equal.
2. Server, continuous batching, one server per K (`--steps-per-call K --multistep-rows 0`: any number
   of rows) and one with the largest K for a batch of one row (`--multistep-rows 1`), every other
   flag default, in turn per point: closed loop at concurrency 1, 4 and 64 on `sentences` and `mix`
   (bench/workload.py), every 4th request streamed: throughput, p50 / p99 latency and p50 time to
   first token.

Needs a bundle with a multi-step decoder (export/multistep.py). Ratios (higher is better):
`steps{K}_vs_1_b{B}` (engine) and `{label}_vs_k1_{workload}_c{C}` (server throughput; labels k4, k16,
k16r1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from pathlib import Path

from bench.loadgen import Summary, closed_loop, summarize, wait_ready
from bench.serverproc import ServerProcess
from bench.workload import DEFAULT_BUNDLE, HELD_OUT, Lengths, held_out_sources, mixed_texts
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.runtime.stepping import StepPolicy

BATCHES = (1, 4, 32)
CONCURRENCIES = (1, 4, 64)
STREAM_EVERY = 4


def engine(bundle: Path, texts: list[str], steps: tuple[int, ...], rounds: int, log=print
           ) -> dict[str, float]:
    """Sentences/s of Runner.translate per K and batch size (medians of interleaved rounds)."""
    runners = {k: Runner(bundle, step_policy=StepPolicy(k)) for k in steps}
    opts = DecodeOptions()
    out: dict[str, float] = {}
    for b in BATCHES:
        def decode(r: Runner, b: int = b) -> list:
            return [h for i in range(0, len(texts), b)
                    for h in r.translate(texts[i : i + b], opts, max_rows=b)]
        first = {k: [(h[0].tokens, h[0].log_prob) for h in decode(r)] for k, r in runners.items()}
        if any(v != first[steps[0]] for v in first.values()):
            raise AssertionError(f"batch {b}: the hypotheses differ between steps per call")
        times: dict[int, list[float]] = {k: [] for k in steps}
        for _ in range(rounds):
            for k, r in runners.items():
                t = time.perf_counter()
                decode(r)
                times[k].append(time.perf_counter() - t)
        for k in steps:
            out[f"engine_k{k}_b{b}"] = len(texts) / statistics.median(times[k])
        speeds = ", ".join(f"K={k} {out[f'engine_k{k}_b{b}']:.0f}/s" for k in steps)
        log(f"  engine b={b}: {speeds}")
    return out


def configs(steps: tuple[int, ...]) -> dict[str, list[str]]:
    """Server flags by label: each K with any number of rows, and the largest K for one row only."""
    out = {f"k{k}": ["--steps-per-call", str(k), "--multistep-rows", "0"] for k in steps}
    return out | {f"k{max(steps)}r1": ["--steps-per-call", str(max(steps)), "--multistep-rows", "1"]}


def server(bundle: Path, workloads: dict[str, list[str]], steps: tuple[int, ...], requests: int,
           log=print) -> dict[str, Summary]:
    """Closed-loop summaries by "{label}_{workload}_c{C}", one server per configuration, in turn."""
    out: dict[str, Summary] = {}
    with contextlib.ExitStack() as stack:
        servers = {label: stack.enter_context(ServerProcess(bundle, "continuous", flags))
                   for label, flags in configs(steps).items()}
        for s in servers.values():
            asyncio.run(wait_ready(s.address))
            asyncio.run(closed_loop(s.address, workloads["sentences"], 8, 32))  # warm-up
        for name, texts in workloads.items():
            for c in CONCURRENCIES:
                n = max(requests // 4, 24) if c < 64 else requests
                for label, s in servers.items():
                    time.sleep(0.3)
                    p = out[f"{label}_{name}_c{c}"] = summarize(
                        asyncio.run(closed_loop(s.address, texts, c, n, STREAM_EVERY)))
                    log(f"  server {label} {name} c={c}: {p.throughput:.1f}/s, p50 {p.p50_ms:.1f} ms, "
                        f"p99 {p.p99_ms:.1f} ms, ttft p50 {p.ttft_p50_ms:.1f} ms")
    return out


def table(summaries: dict[str, Summary]) -> str:
    """Markdown: one row per server point."""
    rows = ["| steps per call | workload | concurrency | texts/s | p50 ms | p99 ms | TTFT p50 ms |",
            "|---|---|---|---|---|---|---|"]
    for key, p in summaries.items():
        label, name, c = key.split("_")
        k, _, one_row = label[1:].partition("r")
        rows.append(f"| {k}{' (one row)' if one_row else ''} | {name} | {c[1:]} | {p.throughput:.1f} | "
                    f"{p.p50_ms:.1f} | {p.p99_ms:.1f} | {p.ttft_p50_ms:.1f} |")
    return "\n".join(rows)


def run(quick: bool = False, bundle: Path = DEFAULT_BUNDLE, steps: tuple[int, ...] = (1, 4, 16),
        split: Path = HELD_OUT, log=print) -> dict[str, float]:
    """Both measurements; the ratios against K = 1."""
    sources = held_out_sources(split)
    texts = sources[: 64 if quick else 256]
    mix = mixed_texts(sources, len(texts), Lengths(bundle))
    figures = engine(bundle, texts, steps, 3 if quick else 5, log)
    summaries = server(bundle, {"sentences": texts, "mix": mix}, steps, 128 if quick else 512, log)
    log(table(summaries))
    ratios = {f"steps{k}_vs_1_b{b}": figures[f"engine_k{k}_b{b}"] / figures[f"engine_k1_b{b}"]
              for k in steps if k != 1 for b in BATCHES}
    labels = [label for label in configs(steps) if label != "k1"]
    ratios |= {f"{label}_vs_k1_{w}_c{c}": summaries[f"{label}_{w}_c{c}"].throughput
               / summaries[f"k1_{w}_c{c}"].throughput
               for label in labels for w in ("sentences", "mix") for c in CONCURRENCIES}
    return ratios


def main(argv: list[str] | None = None) -> int:
    """CLI: the tables, then one JSON line of ratios."""
    ap = argparse.ArgumentParser(prog="python -m bench.steps", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--steps", default="1,4,16", help="comma-separated steps per call (1 is the baseline)")
    a = ap.parse_args(argv)
    steps = tuple(sorted({1, *(int(x) for x in a.steps.split(","))}))
    print(json.dumps({k: round(v, 3) for k, v in run(a.quick, a.bundle, steps).items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
