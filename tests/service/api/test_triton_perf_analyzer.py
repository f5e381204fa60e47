"""Triton's perf_analyzer, unchanged, against a real server on 127.0.0.1 (the tiny bundle).

perf_analyzer is not a pip dependency of the project: `make test` installs it into
.tools/perf_analyzer (the Makefile's perf-analyzer-tools; see tests/support/perf_analyzer.py). Without it
this module is skipped, and fails under CI (`CI` set).
"""

from __future__ import annotations

import pytest

from tests.support import perf_analyzer
from tests.support.kserve import triton_client
from tests.support.server import TEXTS
from tests.support.tools import perf_analyzer_starts as starts
from tests.support.tools import require

WINDOW = 20


@pytest.mark.parametrize("streaming", [False, True], ids=["ModelInfer", "ModelStreamInfer"])
def test_perf_analyzer_measures_the_server(server, tmp_path, streaming):
    """perf_analyzer reads ModelMetadata / ModelConfig, infers, and reads ModelStatistics around windows
    (without perf_analyzer: skipped, or failed under CI)."""
    require(starts(), "perf_analyzer", "`make test` installs it (`make perf-analyzer-tools`)")
    with triton_client(server.address) as client:
        before = client.get_inference_statistics("translator").model_stats[0]
        data = perf_analyzer.write_input_data(TEXTS, tmp_path / "data.json")
        row = perf_analyzer.measure(server.address, data, 2, WINDOW, tmp_path, streaming=streaming)
        after = client.get_inference_statistics("translator").model_stats[0]
    assert row.concurrency == 2 and row.throughput > 0 and row.p50_ms > 0
    assert row.compute_ms > 0  # the server-side split comes from our ModelStatistics
    successes = after.inference_stats.success.count - before.inference_stats.success.count
    assert successes >= 3 * WINDOW  # a stable measurement takes at least three windows
    assert after.inference_count - before.inference_count == successes  # one text per request
    assert after.inference_stats.fail.count == before.inference_stats.fail.count
