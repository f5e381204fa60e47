"""Triton's perf_analyzer, run unchanged against a server: where `make perf-analyzer-tools` installs it,
its environment, its --input-data file, its command line for one concurrency level and its csv report.

The server's tests run it (tests/service/api/test_triton_perf_analyzer.py, test_http_perf_analyzer.py),
and so do the benchmarks (bench/server/perf_analyzer.py). It comes from the tritonclient 2.41.1 wheel (its
last release that ships the binary), installed with the CUDA runtime library it links against (loaded
even without a GPU) into `.tools/perf_analyzer`, apart from the project's own tritonclient; it also needs
Debian's libb64-0d.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO_ROOT

TOOLS = REPO_ROOT / ".tools" / "perf_analyzer"
RUN_TIMEOUT_S = 900.0  # one concurrency level; perf_analyzer is also bounded by its trial limit


@dataclass(frozen=True)
class Row:
    """One concurrency level as perf_analyzer measured it (latencies in ms)."""

    concurrency: int
    throughput: float  # inferences (texts) per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    avg_ms: float
    queue_ms: float  # server side, per request, from ModelStatistics
    compute_ms: float  # server side: compute input + infer + output


def binary(tools: Path = TOOLS) -> Path:
    """The perf_analyzer executable of the tritonclient wheel installed under `tools`."""
    return tools / "bin" / "perf_analyzer"


def environment(tools: Path = TOOLS) -> dict[str, str]:
    """The environment perf_analyzer runs in: libcudart.so.12 of the pip CUDA runtime on the path."""
    env = dict(os.environ)
    libs = str(tools / "nvidia" / "cuda_runtime" / "lib")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libs, env.get("LD_LIBRARY_PATH")) if p)
    return env


def write_input_data(sentences: Sequence[str], path: Path) -> Path:
    """perf_analyzer's --input-data JSON: one request per sentence, TEXT of shape [1]."""
    data = [{"TEXT": {"content": [s], "shape": [1]}} for s in sentences]
    path.write_text(json.dumps({"data": data}, ensure_ascii=False), encoding="utf-8")
    return path


def command(address: str, data: Path, concurrency: int, requests: int, report: Path,
            max_trials: int, stability: int, tools: Path = TOOLS, streaming: bool = False,
            protocol: str = "grpc") -> list[str]:
    """perf_analyzer's command line for one concurrency level (gRPC, or "http": KServe v2 REST; count
    windows, csv report)."""
    return [str(binary(tools)), "-m", "translator", "-i", protocol, "-u", address, "--input-data", str(data),
            "--concurrency-range", str(concurrency), "--measurement-mode", "count_windows",
            "--measurement-request-count", str(requests), "--max-trials", str(max_trials),
            "-s", str(stability), "-f", str(report), "--verbose-csv", *(["--streaming"] if streaming else [])]


def parse_report(report: Path) -> Row:
    """The first row of a perf_analyzer csv report (times there are in microseconds)."""
    with report.open(newline="") as f:
        row = next(csv.DictReader(f))
    us = {k: float(v) for k, v in row.items() if k and v not in (None, "")}
    compute = sum(us[k] for k in ("Server Compute Input", "Server Compute Infer", "Server Compute Output"))
    keys = ("p50 latency", "p90 latency", "p99 latency", "Avg latency", "Server Queue")
    ms = {k: us[k] / 1e3 for k in keys}
    return Row(int(us["Concurrency"]), us["Inferences/Second"], ms["p50 latency"], ms["p90 latency"],
               ms["p99 latency"], ms["Avg latency"], ms["Server Queue"], compute / 1e3)


def measure(address: str, data: Path, concurrency: int, requests: int, workdir: Path, max_trials: int = 8,
            stability: int = 100, tools: Path = TOOLS, streaming: bool = False,
            protocol: str = "grpc") -> Row:
    """Run perf_analyzer at one concurrency level (protocol "grpc" or "http"); RuntimeError with its
    output if it fails."""
    report = workdir / f"perf_analyzer{'' if protocol == 'grpc' else '_' + protocol}_c{concurrency}.csv"
    cmd = command(address, data, concurrency, requests, report, max_trials, stability, tools, streaming,
                  protocol)
    done = subprocess.run(cmd, env=environment(tools), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    if done.returncode != 0 or not report.exists():
        raise RuntimeError(f"perf_analyzer failed (exit {done.returncode}): {' '.join(cmd)}\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return parse_report(report)
