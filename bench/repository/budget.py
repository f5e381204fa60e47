"""The memory budget under churn: three models of one bundle taking turns under traffic in one on-demand
server with `--memory-budget`, against that budget.

    python -m bench.repository.budget [--quick] [--bundle DIR] [--large DIR | --no-large] [--budget-mib N]
        [--rounds N] [--requests N] [--concurrency N]

Per bundle (the default one; the opus-mt-shaped one of bench.marian too when it exists, `large_bundle()`):

- sizing: a server with a budget too large to bind loads two of the models; their charges are its
  `translator_model_resident_bytes` gauges, and the budget is 2.5 times the smaller (`--budget-mib`: given;
  the first load of a process is charged a little more, for what the process sets up once);
- churn: a server of the three models under that budget; `rounds` times, each model in turn gets `requests`
  one-text requests from `concurrency` users. A thread samples the server's VmRSS (/proc/<pid>/status) every
  SAMPLE_S; its fixed cost is its RSS before the first request (on-demand: nothing is loaded yet). Figures:
  RSS above the fixed cost (peak and final) against the budget, their ratio (goal <= 1.10), loads and
  evictions (the server's counters), requests lost (any answer but OK; goal 0), and what is left above the
  fixed cost once every model is unloaded through the repository API (memory an unload did not free);
- arena (the default bundle only, not with --quick): greedy throughput in this process of two runners of the
  bundle, with ONNX Runtime's CPU arena (no budget) and without it (a budget), in turn ARENA_ROUNDS times per
  batch size: the median ratio without / with.

The last line is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tritonclient.grpc as triton
from prometheus_client.parser import text_string_to_metric_families

from bench.common.loadgen import Record
from bench.common.serverproc import ServerProcess, proc_status_kib
from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from bench.repository.models import large_bundle, make_repository, repository_server
from bench.repository.traffic import Target, closed_loops
from service.domain.types import DecodeOptions
from service.ops.malloc import tune_malloc
from service.runtime.model.sessions import CPU
from service.runtime.runner import Runner

NAMES = ("first", "second", "third")
SAMPLE_S = 0.01
BUDGET_MODELS = 2.5  # the budget, in charges of one model: two fit, three do not
SETTLE_S = 1.0  # after the traffic or the unloads, before the final RSS (closes run in the background)
ARENA_BATCHES = ((1, 16), (8, 64), (32, 128))  # (rows per batch, texts) of the arena part
ARENA_ROUNDS = 9
HUGE_BUDGET = "1024GiB"  # the sizing server's: measured as under a budget, never binding
MIB = 2**20
LOADED = re.compile(r"model \S+ version \d+ loaded in [0-9.]+ s \(([0-9.]+) MiB\)")  # server log lines
GREW = re.compile(r"charged ([0-9.]+) MiB of the process's growth")


class RssSampler:
    """A thread reading a process's VmRSS every SAMPLE_S until stopped: the samples in MiB."""

    def __init__(self, pid: int) -> None:
        """Not started."""
        self.pid, self.samples = pid, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        """Sample until told to stop."""
        while not self._stop.is_set():
            self.samples.append(proc_status_kib(self.pid, "VmRSS") / 1024)
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> RssSampler:
        """Start sampling."""
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    """A sample of the server's /metrics summed over the series that have `labels`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def charges_mib(root: Path, extra: Sequence[str], texts: Sequence[str]) -> list[float]:
    """The charges of the first two models, loaded one after the other by a request each, in MiB."""
    out = []
    with repository_server(root, "on-demand", (), ["--memory-budget", HUGE_BUDGET, *extra]) as server:
        for name in NAMES[:2]:
            asyncio.run(closed_loops([Target(server.address, name)], texts, 1, 1))
            out.append(metric(server, "translator_model_resident_bytes", model=name) / MIB)
    return out


def churn(root: Path, budget_mib: float, extra: Sequence[str], texts: Sequence[str], rounds: int,
          requests: int, concurrency: int) -> dict[str, Any]:
    """The three models in turn under the budget; the RSS, counts and requests figures."""
    args = ["--memory-budget", f"{round(budget_mib * MIB)}", "--log-level", "INFO", *extra]  # INFO: charges
    records: list[Record] = []
    with repository_server(root, "on-demand", (), args) as server:
        fixed = server.rss_kib() / 1024
        start = time.perf_counter()
        with RssSampler(server.pid) as sampler:
            for _ in range(rounds):
                for name in NAMES:
                    target = Target(server.address, name)
                    records += asyncio.run(closed_loops([target], texts, concurrency, requests))[0]
            time.sleep(SETTLE_S)
        elapsed = time.perf_counter() - start
        final = server.rss_kib() / 1024
        loads = metric(server, "translator_model_loads_total", result="ok")
        evictions = metric(server, "translator_model_unloads_total", reason="evicted")
        loaded_at_end = metric(server, "translator_models_loaded")
        charged = metric(server, "translator_model_resident_bytes") / MIB
        client = triton.InferenceServerClient(server.address)
        try:
            for name in NAMES:
                client.unload_model(name)
        finally:
            client.close()
        time.sleep(SETTLE_S)
        unloaded = server.rss_kib() / 1024
        log = server.log_path.read_text(errors="replace")
        at_loads, grew = ([float(m) for m in pattern.findall(log)] for pattern in (LOADED, GREW))
    peak = max(sampler.samples)
    lost = sum(r.code != "OK" for r in records)
    return {"budget_mib": budget_mib, "fixed_cost_mib": fixed, "rounds": rounds,
            "requests_per_turn": requests, "concurrency": concurrency, "seconds": elapsed,
            "rss_samples": len(sampler.samples),
            "peak_above_fixed_mib": peak - fixed, "final_above_fixed_mib": final - fixed,
            "peak_vs_budget": (peak - fixed) / budget_mib, "final_vs_budget": (final - fixed) / budget_mib,
            "charges_at_loads_mib": at_loads, "growth_charged_mib": grew, "charged_at_end_mib": charged,
            "loaded_at_end": loaded_at_end, "loads": loads, "evictions": evictions,
            "after_unloading_all_above_fixed_mib": unloaded - fixed,
            "requests_sent": len(records), "requests_lost": lost,
            "errors": sorted({r.code for r in records if r.code != "OK"})}


def texts_per_s(runner: Runner, texts: Sequence[str], rows: int) -> float:
    """Greedy translations per second of `texts`, `rows` at a time."""
    start = time.perf_counter()
    for first in range(0, len(texts), rows):
        runner.translate(texts[first:first + rows], DecodeOptions(beam_size=1), max_rows=rows)
    return len(texts) / (time.perf_counter() - start)


def arena_cost(bundle: Path, texts: Sequence[str], rounds: int) -> dict[str, Any]:
    """In this process, two runners of `bundle`, with and without ONNX Runtime's CPU arena (as with no
    budget and with one), translating the same texts in turn, `rounds` times per batch size; per batch
    size the median ratio of throughput without the arena to with it."""
    tune_malloc()  # as the server does
    runners = {arena: Runner(bundle, providers=[CPU], cpu_arena=arena) for arena in (True, False)}
    out: dict[str, Any] = {}
    for rows, count in ARENA_BATCHES:
        ratios = []
        for _ in range(rounds):
            speed = {arena: texts_per_s(runner, texts[:count], rows) for arena, runner in runners.items()}
            ratios.append(speed[False] / speed[True])
        out[f"rows_{rows}"] = {"texts": count, "ratios": ratios, "ratio": statistics.median(ratios)}
    return out


def run_bundle(bundle: Path, work: Path, texts: Sequence[str], a: argparse.Namespace) -> dict[str, Any]:
    """Sizing and churn of three copies of `bundle`."""
    make_repository(work, bundle, NAMES)
    charges = [] if a.budget_mib else charges_mib(work, [], texts)
    budget = a.budget_mib or BUDGET_MODELS * min(charges)
    _log(f"  charges {', '.join(f'{c:.1f}' for c in charges) or 'not measured'} MiB; budget {budget:.1f} MiB")
    got = churn(work, budget, [], texts, a.rounds, a.requests, a.concurrency)
    _log(f"  peak {got['peak_above_fixed_mib']:.1f} MiB above the fixed {got['fixed_cost_mib']:.1f} MiB "
         f"({got['peak_vs_budget']:.2f} of the budget), final {got['final_above_fixed_mib']:.1f} MiB, "
         f"{got['loads']:.0f} loads, {got['evictions']:.0f} evictions, {got['requests_lost']} lost")
    return {"bundle": str(bundle), "charges_mib": charges, **got}


def _log(message: str) -> None:
    """Progress on stderr (the JSON line goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


def _rounded(value: Any) -> Any:
    """Floats to 3 decimals, through lists and dicts."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m bench.repository.budget",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two rounds, 16 requests per turn, no arena part")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="the bundle the three models copy")
    ap.add_argument("--large", type=Path,
                    help="the opus-mt-shaped bundle (default: runs/bench-marian/*/bundle)")
    ap.add_argument("--no-large", action="store_true", help="leave the opus-mt-shaped bundle out")
    ap.add_argument("--budget-mib", type=float,
                    help=f"the budget (default: {BUDGET_MODELS} measured charges)")
    ap.add_argument("--rounds", type=int, default=4, help="turns of each model")
    ap.add_argument("--requests", type=int, default=32, help="requests per turn")
    ap.add_argument("--concurrency", type=int, default=4, help="users sending them")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.requests = 2, 16
    texts = held_out_sources()[:200]
    large = None if a.no_large else (a.large or large_bundle())
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-budget-") as tmp:
        _log(f"## churn of three copies of {a.bundle}")
        results["default"] = run_bundle(a.bundle, Path(tmp) / "default", texts, a)
        if large is not None:
            _log(f"## churn of three copies of {large}")
            results["opus-mt"] = run_bundle(large, Path(tmp) / "opus-mt", texts, a)
        else:
            results["opus-mt"] = "skipped: no opus-mt-shaped bundle (python -m bench.marian makes one)"
        if not a.quick:
            _log("## throughput without and with ONNX Runtime's CPU arena (no budget / a budget)")
            results["arena"] = arena_cost(a.bundle, texts, ARENA_ROUNDS)
            _log("  without / with the arena: " + ", ".join(f"{k} {v['ratio']:.3f}"
                                                             for k, v in results["arena"].items()))
    print(json.dumps(_rounded(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
