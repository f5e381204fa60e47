"""Two models in one process against two single-model processes on the same cores and the same files.

Per round: two `--bundle` servers (one per copy of the bundle) under concurrency/2 users each at once,
then one repository server of both copies (`--model-control-mode explicit --load-model '*'`) under
concurrency/2 users per model, each after a warm-up of its own. Throughput is the answered requests of
both models over the time from the first send to the last answer; resident memory is VmRSS after the
measured load (the two processes summed). The fixed cost of a process is the RSS of the repository
server with no model loaded yet (explicit mode, nothing named: the interpreter, gRPC and ONNX Runtime's
libraries, before any session).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common.loadgen import Record, summarize
from bench.common.serverproc import ServerProcess
from bench.common.workload import PAUSE_S
from bench.repository.models import bundle_server, make_repository, repository_server
from bench.repository.plan import Plan
from bench.repository.traffic import Target, closed_loops

NAMES = ("first", "second")


Loads = tuple[list[list[Record]], list[list[Record]]]  # (warm-up, measured), each per target


def _load(targets: list[Target], texts: Sequence[str], plan: Plan, requests: int) -> Loads:
    """A warm-up, then the measured closed loops over both targets at once (half the users each)."""
    each = max(1, plan.concurrency // len(targets))
    warm = asyncio.run(closed_loops(targets, texts, each, plan.warmup))
    return warm, asyncio.run(closed_loops(targets, texts, each, max(1, requests // len(targets))))


def _side(loads: Loads, servers: Sequence[ServerProcess]) -> dict[str, Any]:
    """One configuration's figures: throughput over both models, counts (the warm-up's included in sent
    and answered), latency, RSS now and peak."""
    warm, records = loads
    both = summarize([r for target in records for r in target])
    everything = [r for target in (*warm, *records) for r in target]
    return {"throughput": both.throughput, "per_model": [summarize(t).throughput for t in records],
            "requests": both.requests, "sent": len(everything),
            "answered": sum(r.code == "OK" for r in everything), "errors": both.errors,
            "p50_ms": both.p50_ms, "p99_ms": both.p99_ms,
            "rss_mib": sum(s.rss_kib() for s in servers) / 1024,
            "peak_rss_mib": sum(s.peak_rss_kib() for s in servers) / 1024}


def two_processes(folders: Sequence[Path], texts: Sequence[str], plan: Plan, requests: int,
                  max_output_tokens: int) -> dict[str, Any]:
    """Two `--bundle` servers, one per folder, loaded at once."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(bundle_server(folder, plan.server_args())) for folder in folders]
        targets = [Target(s.address, "", max_output_tokens) for s in servers]
        return _side(_load(targets, texts, plan, requests), servers)


def one_process(root: Path, names: Sequence[str], texts: Sequence[str], plan: Plan, requests: int,
                max_output_tokens: int) -> dict[str, Any]:
    """One repository server with every model loaded at start, each model loaded at once."""
    with repository_server(root, "explicit", ["*"], plan.server_args()) as server:
        targets = [Target(server.address, name, max_output_tokens) for name in names]
        return _side(_load(targets, texts, plan, requests), [server])


def fixed_cost_mib(root: Path, extra: Sequence[str] = ()) -> float:
    """RSS of a repository server before any model loads (explicit mode, nothing named), MiB."""
    with repository_server(root, "explicit", (), extra) as server:
        return server.rss_kib() / 1024


def run(bundle: Path, work: Path, texts: Sequence[str], plan: Plan, requests: int, max_output_tokens: int = 0,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Both configurations, interleaved over plan.rounds; the figures and their ratios."""
    folders = make_repository(work, bundle, NAMES)
    fixed = fixed_cost_mib(work, plan.server_args())
    log(f"  fixed cost (a server with no model loaded): {fixed:.0f} MiB")
    rounds = []
    for k in range(plan.rounds):
        two = two_processes(list(folders.values()), texts, plan, requests, max_output_tokens)
        log(f"  round {k + 1}: two processes {two['throughput']:.1f} texts/s, {two['rss_mib']:.0f} MiB")
        time.sleep(PAUSE_S)
        one = one_process(work, NAMES, texts, plan, requests, max_output_tokens)
        log(f"  round {k + 1}: one process {one['throughput']:.1f} texts/s, {one['rss_mib']:.0f} MiB")
        time.sleep(PAUSE_S)
        rounds.append({"two_processes": two, "one_process": one,
                       "throughput_ratio": one["throughput"] / two["throughput"]})
    one_rss = statistics.median(r["one_process"]["rss_mib"] for r in rounds)
    two_rss = statistics.median(r["two_processes"]["rss_mib"] for r in rounds)
    allowed = two_rss - fixed
    sent = sum(r[side]["sent"] for r in rounds for side in ("one_process", "two_processes"))
    answered = sum(r[side]["answered"] for r in rounds for side in ("one_process", "two_processes"))
    return {"bundle": str(bundle), "models": list(NAMES), "concurrency": plan.concurrency,
            "requests_per_side": requests, "rounds": rounds,
            "throughput_ratio": statistics.median(r["throughput_ratio"] for r in rounds),
            "fixed_cost_mib": fixed, "fixed_cost_measure": "RSS of a server process before any model loads",
            "one_process_rss_mib": one_rss, "two_processes_rss_mib": two_rss, "rss_allowed_mib": allowed,
            "rss_vs_allowed": one_rss / allowed if allowed > 0 else float("nan"),
            "requests_sent": sent, "requests_answered": answered, "requests_lost": sent - answered}
