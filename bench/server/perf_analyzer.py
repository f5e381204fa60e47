"""Triton's perf_analyzer against this server over KServe v2 gRPC, unchanged.

    make perf-analyzer                       # installs the tool (once), then runs this module
    python -m bench.server.perf_analyzer [--quick] [--bundle DIR] [--concurrency 1 2 4 ...] [--loadgen]

The tool itself (where it is installed, its environment, command line and report) is run through
tests/support/perf_analyzer.py, which the server's tests use too. This module starts
`python -m service.server` on a free 127.0.0.1 port with the default bundle
(bench/common/serverproc.py), writes an `--input-data` JSON of held-out sentences (one
text per request, TEXT shape [1]) and runs perf_analyzer at each concurrency (1, 2, 4, ..., 64: its
`--concurrency-range` only steps additively, so one run per level), each bounded by count
windows and a trial limit. It prints one markdown table: client-side throughput and latency
percentiles, and the server-side queue / compute split perf_analyzer reads from
ModelStatistics. `--loadgen` adds bench/common/loadgen.py's closed loop (translator.v1 `Translate`)
on the same sentences and concurrencies, on the same server, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common.loadgen import summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at
from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from tests.support.perf_analyzer import (  # the tool's runner, shared with the server's tests
    RUN_TIMEOUT_S,
    TOOLS,
    Row,
    binary,
    command,
    environment,
    measure,
    parse_report,
    write_input_data,
)

__all__ = ["CONCURRENCY", "RUN_TIMEOUT_S", "TOOLS", "Row", "binary", "cheaper_client", "command",
           "environment", "loadgen_rows", "main", "markdown", "measure", "measure_with_cpu", "parse_report",
           "write_input_data"]
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


def measure_with_cpu(address: str, data: Path, concurrency: int, requests: int, workdir: Path,
                     max_trials: int = 8, stability: int = 100, tools: Path = TOOLS) -> tuple[Row, float]:
    """`measure`, and perf_analyzer's own CPU time per request in ms (its CPU over the requests its
    throughput makes in its wall time: start-up included, so an upper bound)."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    row = measure(address, data, concurrency, requests, workdir, max_trials, stability, tools)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return row, 1e3 * cpu / (row.throughput * wall)


def cheaper_client(cpu_ms: dict[str, float]) -> str:
    """The client that took the least CPU per request (ms; NaN: not measured; the first on a tie)."""
    measured = {client: v for client, v in cpu_ms.items() if not math.isnan(v)} or cpu_ms
    return min(measured, key=measured.__getitem__)


def loadgen_rows(address: str, sentences: Sequence[str], levels: Sequence[int],
                 requests: int) -> list[tuple[int, float, float, float, float]]:
    """The closed loop on translator.v1 at each level: (c, texts/s, p50, p90, p99 ms)."""
    rows = []
    for c in levels:
        summary = summarize(asyncio.run(closed_loop_at(address, list(sentences), c, max(requests, 12 * c))))
        rows.append((c, summary.throughput, summary.p50_ms, summary.p90_ms, summary.p99_ms))
    return rows


def markdown(rows: Sequence[Row]) -> str:
    """The perf_analyzer table of docs/performance.md."""
    lines = ["| concurrency | texts/s | p50 ms | p90 ms | p99 ms | avg ms | server queue ms "
             "| server compute ms |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.concurrency} | {r.throughput:.1f} | {r.p50_ms:.1f} | {r.p90_ms:.1f} | {r.p99_ms:.1f} | "
              f"{r.avg_ms:.1f} | {r.queue_ms:.1f} | {r.compute_ms:.1f} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.server.perf_analyzer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--batching", default="continuous", choices=("none", "dynamic", "continuous"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--sentences", type=int, default=200, help="held-out sentences in the input data")
    parser.add_argument("--window-requests", type=int, default=40,
                        help="requests per count window at concurrency 1 (scaled up with concurrency)")
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--stability", type=int, default=100,
                        help="perf_analyzer -s, in percent (lenient: latency on a shared machine is noisy)")
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 4, small windows")
    parser.add_argument("--loadgen", action="store_true", help="also run the closed loop of bench/common")
    parser.add_argument("--streaming", action="store_true", help="perf_analyzer over ModelStreamInfer")
    parser.add_argument("--tools", type=Path, default=TOOLS)
    args = parser.parse_args(argv)
    if not binary(args.tools).exists():
        parser.error(f"{binary(args.tools)} is missing: run `make perf-analyzer` to install it")
    levels = [1, 4] if args.quick else args.concurrency
    base = 10 if args.quick else args.window_requests
    sentences = held_out_sources()[: args.sentences]
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        workdir = Path(tmp)
        data = write_input_data(sentences, workdir / "input_data.json")
        with ServerProcess(args.bundle, args.batching) as server:
            address = server.address
            print(f"server {address} ({args.batching}), {len(sentences)} held-out sentences, "
                  f"concurrency {levels}", flush=True)
            rows = []
            for c in levels:
                rows.append(measure(address, data, c, max(base, 4 * c), workdir, args.max_trials,
                                    args.stability, args.tools, args.streaming))
                print(f"  c={c}: {rows[-1].throughput:.1f} texts/s, p50 {rows[-1].p50_ms:.1f} ms", flush=True)
            extra = loadgen_rows(address, sentences, levels, 3 * base) if args.loadgen else []
    rpc = "ModelStreamInfer" if args.streaming else "ModelInfer"
    print(f"\nTriton perf_analyzer ({rpc}, one held-out sentence per request):\n" + markdown(rows))
    if extra:
        print("\nbench/common/loadgen.py closed loop (translator.v1 Translate, same sentences):")
        print("| concurrency | texts/s | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|")
        for c, tput, p50, p90, p99 in extra:
            print(f"| {c} | {tput:.1f} | {p50:.1f} | {p90:.1f} | {p99:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
