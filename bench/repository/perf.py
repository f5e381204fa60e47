"""Triton's perf_analyzer against one named model of several (`-m <name>`), through
bench/server/perf_analyzer.py.

One explicit-mode server of three copies of a bundle, all loaded; perf_analyzer loads the first by name
at each concurrency (its model metadata, config and statistics, ModelInfer), and the server's KServe
statistics then show which models answered: the named one every inference, the others none.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tritonclient.grpc as triton

from bench.repository.models import make_repository, repository_server
from bench.server import perf_analyzer

NAMES = ("named", "other-1", "other-2")


def command(address: str, model: str, data: Path, concurrency: int, requests: int, report: Path) -> list[str]:
    """bench/server/perf_analyzer.py's command line for one level, against `model`."""
    cmd = perf_analyzer.command(address, data, concurrency, requests, report, max_trials=8, stability=100)
    cmd[cmd.index("-m") + 1] = model
    return cmd


def measure(address: str, model: str, data: Path, concurrency: int, requests: int,
            work: Path) -> dict[str, Any]:
    """One perf_analyzer level against `model`: its row (bench/server/perf_analyzer.py Row, as a dict)."""
    report = work / f"perf_analyzer_{model}_c{concurrency}.csv"
    cmd = command(address, model, data, concurrency, requests, report)
    done = subprocess.run(cmd, env=perf_analyzer.environment(), capture_output=True, text=True,
                          timeout=perf_analyzer.RUN_TIMEOUT_S, check=False)
    if done.returncode != 0 or not report.exists():
        raise RuntimeError(f"perf_analyzer failed (exit {done.returncode}): {' '.join(cmd)}\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return asdict(perf_analyzer.parse_report(report))


def inference_counts(address: str, names: Sequence[str]) -> dict[str, int]:
    """Each model's inference count from the server's KServe statistics."""
    client = triton.InferenceServerClient(address)
    try:
        return {name: sum(s.inference_count for s in client.get_inference_statistics(name).model_stats)
                for name in names}
    finally:
        client.close()


def run(bundle: Path, work: Path, texts: Sequence[str], levels: Sequence[int], requests: int,
        log: Callable[[str], None] = print, extra: Sequence[str] = ()) -> dict[str, Any]:
    """perf_analyzer at each level against the first of three loaded models; None-valued figures and the
    reason when perf_analyzer is not installed."""
    if not perf_analyzer.binary().exists():
        reason = f"{perf_analyzer.binary()} is missing (make perf-analyzer-tools installs it)"
        log(f"  skipped: {reason}")
        return {"skipped": reason, "rows": [], "inference_counts": {}}
    make_repository(work, bundle, NAMES)
    data = perf_analyzer.write_input_data(texts, work / "input_data.json")
    with repository_server(work, "explicit", ["*"], extra) as server:
        before = inference_counts(server.address, NAMES)
        rows = []
        for c in levels:
            rows.append(measure(server.address, NAMES[0], data, c, max(requests, 4 * c), work))
            log(f"  perf_analyzer -m {NAMES[0]} c={c}: {rows[-1]['throughput']:.1f} texts/s, "
                f"p50 {rows[-1]['p50_ms']:.1f} ms")
        after = inference_counts(server.address, NAMES)
    counts = {name: after[name] - before[name] for name in NAMES}
    return {"skipped": None, "model": NAMES[0], "models_loaded": list(NAMES), "rows": rows,
            "inference_counts": counts,
            "only_the_named_model_answered": counts[NAMES[0]] > 0 and not any(counts[n] for n in NAMES[1:])}
