"""Triton's perf_analyzer, unchanged, against a real server on 127.0.0.1 (the tiny bundle).

perf_analyzer is not a pip dependency of the project: `make test` installs it into
.tools/perf_analyzer (see bench/perf_analyzer.py). Without it this module is skipped, and fails
under CI (`CI` set).
"""

from __future__ import annotations

import os
import subprocess

import pytest
import tritonclient.grpc as triton

from bench import perf_analyzer
from tests.support.server import TEXTS


def _runs() -> bool:
    """perf_analyzer is installed and starts (its shared libraries load)."""
    if not perf_analyzer.binary().exists():
        return False
    done = subprocess.run([str(perf_analyzer.binary()), "--version"], env=perf_analyzer.environment(),
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0 and "Perf Analyzer Version" in done.stdout + done.stderr


RUNS = _runs()
needs_perf_analyzer = pytest.mark.skipif(not RUNS and not os.environ.get("CI"),
                                         reason="perf_analyzer not installed: `make perf-analyzer-tools`")


def test_perf_analyzer_is_installed():
    """`make test` installs perf_analyzer: missing, this fails in CI and is skipped elsewhere."""
    if not RUNS and not os.environ.get("CI"):
        pytest.skip("perf_analyzer not installed: `make perf-analyzer-tools` installs it")
    assert RUNS, "perf_analyzer is missing or does not start: `make test` installs it"
WINDOW = 20


@needs_perf_analyzer
@pytest.mark.parametrize("streaming", [False, True], ids=["ModelInfer", "ModelStreamInfer"])
def test_perf_analyzer_measures_the_server(server, tmp_path, streaming):
    """perf_analyzer reads ModelMetadata / ModelConfig, infers, and reads ModelStatistics around windows."""
    client = triton.InferenceServerClient(url=server.address)
    try:
        before = client.get_inference_statistics("translator").model_stats[0]
        data = perf_analyzer.write_input_data(TEXTS, tmp_path / "data.json")
        row = perf_analyzer.measure(server.address, data, 2, WINDOW, tmp_path, streaming=streaming)
        after = client.get_inference_statistics("translator").model_stats[0]
    finally:
        client.close()
    assert row.concurrency == 2 and row.throughput > 0 and row.p50_ms > 0
    assert row.compute_ms > 0  # the server-side split comes from our ModelStatistics
    successes = after.inference_stats.success.count - before.inference_stats.success.count
    assert successes >= 3 * WINDOW  # a stable measurement takes at least three windows
    assert after.inference_count - before.inference_count == successes  # one text per request
    assert after.inference_stats.fail.count == before.inference_stats.fail.count


def test_input_data_and_report_parsing(tmp_path):
    """The --input-data JSON holds one [1]-shaped TEXT per sentence; a csv report parses to a Row."""
    path = perf_analyzer.write_input_data(["a b", "c"], tmp_path / "d.json")
    assert path.read_text() == '{"data": [{"TEXT": {"content": ["a b"], "shape": [1]}}, ' \
                               '{"TEXT": {"content": ["c"], "shape": [1]}}]}'
    report = tmp_path / "r.csv"
    report.write_text(
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,"
        "p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait\n"
        "4,57.5,8,3541,1500,200,60000,1000,3,59800,120200,140000,152900,70400,12,70000\n")
    row = perf_analyzer.parse_report(report)
    assert (row.concurrency, row.throughput) == (4, 57.5)
    assert (row.p50_ms, row.p90_ms, row.p99_ms, row.avg_ms) == pytest.approx((59.8, 120.2, 152.9, 70.4))
    assert (row.queue_ms, row.compute_ms) == pytest.approx((1.5, 61.2))
