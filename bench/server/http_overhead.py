"""HTTP/REST against gRPC on one server (issue 33's benchmark): Triton's perf_analyzer, unchanged,
with `-i grpc` and `-i http` (binary tensor data) against the same server process, one held-out
sentence per request, at concurrency 1 and 64. It reports both protocols and the two ratios the
issue asks for: HTTP / gRPC throughput at the highest concurrency (>= 0.8 wanted) and HTTP / gRPC
p50 latency at concurrency 1 (<= 1.3 wanted). The protocols alternate per level, so a drift of the
machine touches both.

    .venv/bin/python -m bench.server.http_overhead [--bundle DIR] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common.serverproc import ServerProcess, free_port
from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from bench.server.perf_analyzer import TOOLS, Row, binary, measure, write_input_data

PROTOCOLS = ("grpc", "http")


def ratios(rows: dict[str, list[Row]]) -> dict[str, float]:
    """HTTP / gRPC throughput at the highest concurrency and p50 latency at the lowest."""
    grpc, http = rows["grpc"], rows["http"]
    return {"throughput_ratio_at_max": http[-1].throughput / grpc[-1].throughput,
            "p50_ratio_at_min": http[0].p50_ms / grpc[0].p50_ms}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.server.http_overhead",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--window-requests", type=int, default=40)
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--stability", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 4, small windows")
    parser.add_argument("--json", type=Path, help="write the rows and ratios here")
    parser.add_argument("--tools", type=Path, default=TOOLS)
    args = parser.parse_args(argv)
    if not binary(args.tools).exists():
        parser.error(f"{binary(args.tools)} is missing: run `make perf-analyzer-tools` to install it")
    levels = [1, 4] if args.quick else sorted(args.concurrency)
    base = 10 if args.quick else args.window_requests
    sentences = held_out_sources()[: args.sentences]
    http_port = free_port()
    rows: dict[str, list[Row]] = {p: [] for p in PROTOCOLS}
    with tempfile.TemporaryDirectory(prefix="http-overhead-") as tmp:
        workdir = Path(tmp)
        data = write_input_data(sentences, workdir / "input_data.json")
        with ServerProcess(args.bundle, "continuous", ["--http-port", str(http_port)]) as server:
            host = server.address.rsplit(":", 1)[0]
            addresses = {"grpc": server.address, "http": f"{host}:{http_port}"}
            for c in levels:
                for protocol in PROTOCOLS if c % 2 else reversed(PROTOCOLS):
                    row = measure(addresses[protocol], data, c, max(base, 4 * c), workdir, args.max_trials,
                                  args.stability, args.tools, protocol=protocol)
                    rows[protocol].append(row)
                    print(f"  {protocol} c={c}: {row.throughput:.1f} texts/s, p50 {row.p50_ms:.1f} ms",
                          flush=True)
    summary = ratios(rows)
    print("\n| protocol | concurrency | texts/s | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|---|")
    for protocol in PROTOCOLS:
        for r in rows[protocol]:
            print(f"| {protocol} | {r.concurrency} | {r.throughput:.1f} | {r.p50_ms:.1f} | {r.p90_ms:.1f} | "
                  f"{r.p99_ms:.1f} |")
    print(f"\nHTTP / gRPC throughput at concurrency {levels[-1]}: {summary['throughput_ratio_at_max']:.3f} "
          f"(>= 0.8 wanted); p50 at concurrency {levels[0]}: {summary['p50_ratio_at_min']:.3f} "
          "(<= 1.3 wanted)")
    if args.json is not None:
        table = {p: [dataclasses.asdict(r) for r in rs] for p, rs in rows.items()}
        args.json.write_text(json.dumps({"rows": table, **summary}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
