"""One server, every protocol at each concurrency in turn: a closed-loop point per (protocol, concurrency).

One `python -m service.server` process (default configuration: continuous batching, `--http-port` on a
free port) serves all four clients of bench/protocols/clients.py on the held-out sentences, each driven
by the closed loop of bench/common/loadgen.py. At each concurrency every protocol takes its point before
the next concurrency starts, the order rotated per concurrency, so that a drift of the machine touches
every protocol alike; the whole sweep runs `rounds` times (the order rotated again each round) and each
point pools its rounds: percentiles over all its requests, throughput = its answers / the time its rounds
took. Each point records the client's CPU time per request too: the clients are Python (grpc.aio,
aiohttp) on the server's cores.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.charts import record as chart_record
from bench.common.loadgen import Record, Summary, closed_loop, summarize
from bench.common.serverproc import ServerProcess, free_port
from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, PAUSE_S, held_out_sources
from bench.protocols.clients import PROTOCOLS, open_client
from bench.server.modes import Plan as ServerPlan

# the server benchmark's closed-loop concurrencies up to 64 (its gRPC curve's points)
CONCURRENCIES = tuple(c for c in ServerPlan().concurrencies if c <= 64)


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    protocols: tuple[str, ...] = tuple(PROTOCOLS)
    concurrencies: tuple[int, ...] = CONCURRENCIES
    min_requests: int = 200  # per point and round: max(min_requests, per_user * concurrency)
    per_user: int = 5
    rounds: int = 3  # sweeps over every concurrency and protocol, pooled per point
    warmup_requests: int = 32  # per protocol, at concurrency 8, before the first point
    intra_op_threads: int = 0  # the server's ONNX Runtime threads (0: its default)

    def requests_at(self, concurrency: int) -> int:
        """Requests of one point in one round."""
        return max(self.min_requests, self.per_user * concurrency)

    def order(self, k: int) -> list[str]:
        """The protocols' order at the k-th concurrency: rotated by k."""
        n = len(self.protocols)
        return [self.protocols[(k + j) % n] for j in range(n)]


QUICK = Plan(concurrencies=(1, 8, 64), min_requests=60, per_user=2, rounds=2, warmup_requests=16)


@dataclass
class Point:
    """One protocol at one concurrency: the client's summary and its CPU time per request (ms)."""

    protocol: str
    concurrency: int
    summary: Summary
    client_cpu_ms: float


def pooled(rounds: Sequence[list[Record]]) -> Summary:
    """One summary of several rounds of a point: percentiles over every request, throughput over the
    rounds' summed elapsed times."""
    elapsed = sum(summarize(records).elapsed_s for records in rounds)
    s = summarize([r for records in rounds for r in records])
    tokens = s.tokens_per_s * s.elapsed_s
    return replace(s, elapsed_s=elapsed, throughput=s.ok / elapsed, tokens_per_s=tokens / elapsed)


def take(protocol: str, addresses: dict[str, str], texts: Sequence[str], concurrency: int,
         requests: int) -> tuple[list[Record], float]:
    """Run one closed-loop point: its records and the client's CPU seconds."""
    async def load() -> list:
        async with open_client(protocol, addresses, texts, concurrency) as call:
            return await closed_loop(call, concurrency, requests)

    cpu0 = time.process_time()
    records = asyncio.run(load())
    return records, time.process_time() - cpu0


def measure(plan: Plan, bundle: Path, texts: Sequence[str],
            log: Callable[[str], None] = print) -> list[Point]:
    """Start the server, warm every protocol up, then take every point (protocols interleaved)."""
    http_port = free_port()
    flags = ["--http-port", str(http_port), "--intra-op-threads", str(plan.intra_op_threads)]
    runs: dict[tuple[str, int], list[list[Record]]] = {(k, c): [] for k in plan.protocols
                                                       for c in plan.concurrencies}
    cpu = dict.fromkeys(runs, 0.0)
    with ServerProcess(bundle, "continuous", flags) as server:
        addresses = {"grpc": server.address, "http": f"127.0.0.1:{http_port}"}
        for protocol in plan.protocols:
            warm = summarize(take(protocol, addresses, texts, min(8, plan.warmup_requests),
                                  plan.warmup_requests)[0])
            if warm.ok != warm.requests:
                raise RuntimeError(f"{protocol}: the warm-up failed: {warm.errors}\n{server.log_tail()}")
        for r in range(plan.rounds):
            for k, c in enumerate(plan.concurrencies):
                for protocol in plan.order(k + r):
                    time.sleep(PAUSE_S)
                    records, seconds = take(protocol, addresses, texts, c, plan.requests_at(c))
                    runs[protocol, c].append(records)
                    cpu[protocol, c] += seconds
                    s = summarize(records)
                    log(f"  round {r + 1}/{plan.rounds} {protocol} c={c}: {s.throughput:.1f}/s, "
                        f"p50 {s.p50_ms:.1f} ms, p99 {s.p99_ms:.1f} ms, errors {s.errors or 0}")
    points = []
    for (protocol, c), rounds in runs.items():
        s = pooled(rounds)
        points.append(Point(protocol, c, s, 1e3 * cpu[protocol, c] / s.requests))
    return points


def record(points: Sequence[Point], rounds: int) -> dict[str, Any]:
    """The chart record's data (kind "protocols"): every point, and the protocols' names."""
    rows = [{"protocol": p.protocol, "concurrency": p.concurrency, "requests": p.summary.requests,
             "errors": sum(p.summary.errors.values()), "throughput": round(p.summary.throughput, 2),
             **{k: round(getattr(p.summary, k), 2) for k in ("p50_ms", "p90_ms", "p99_ms")},
             "client_cpu_ms": round(p.client_cpu_ms, 3)} for p in points]
    names = {k: v for k, v in PROTOCOLS.items() if any(p.protocol == k for p in points)}
    return {"title": "One server (continuous batching) per protocol", "rounds": rounds, "protocols": names,
            "points": rows}


def table(points: Sequence[Point]) -> str:
    """A markdown table of the points."""
    lines = ["| protocol | concurrency | requests | sentences/s | p50 ms | p90 ms | p99 ms | errors | "
             "client CPU ms/request |", "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        s = p.summary
        lines.append(f"| {p.protocol} | {p.concurrency} | {s.requests} | {s.throughput:.1f} | "
                     f"{s.p50_ms:.1f} | {s.p90_ms:.1f} | {s.p99_ms:.1f} | {sum(s.errors.values())} | "
                     f"{p.client_cpu_ms:.2f} |")
    return "\n".join(lines) + "\n"


def figures(points: list[Point]) -> dict[str, float]:
    """Each protocol's sentences/s at the highest concurrency, and HTTP infer / gRPC Translate there."""
    top = max(p.concurrency for p in points)
    at = {p.protocol: p.summary.throughput for p in points if p.concurrency == top}
    out = {f"{k.replace('-', '_')}_c{top}_per_s": v for k, v in at.items()}
    if "grpc" in at and "http-infer" in at:
        out[f"http_infer_vs_grpc_c{top}"] = at["http-infer"] / at["grpc"]
    return out


def run(quick: bool = False, bundle: Path = DEFAULT_BUNDLE, intra_op_threads: int = 0,
        out: Path | None = None, plan: Plan | None = None, sources: Path = HELD_OUT) -> dict[str, float]:
    """Measure, print the table, write the record and chart into `out`; the figures."""
    plan = replace(plan or (QUICK if quick else Plan()), intra_op_threads=intra_op_threads)
    points = measure(plan, Path(bundle), held_out_sources(sources), log=_progress)
    print(table(points), flush=True)
    if out is not None:
        for path in chart_record.write(out, "protocols", "protocols", record(points, plan.rounds)):
            _progress(f"  wrote {path}")
    return figures(points)


def _progress(message: str) -> None:
    """Progress lines on stderr (the table goes to stdout)."""
    print(message, file=sys.stderr, flush=True)
