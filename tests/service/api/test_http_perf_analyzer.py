"""Triton's perf_analyzer over HTTP (`-i http`), unchanged, against a real server on 127.0.0.1:
it reads the model's metadata, config and statistics through KServe v2 REST and infers with binary
tensor data at concurrency 1 to 64 with no error (perf_analyzer exits non-zero on any failed
request). Without perf_analyzer: skipped, or failed under CI, as tests/service/api/
test_triton_perf_analyzer.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support import perf_analyzer
from tests.support.http import triton_http_client
from tests.support.server import TEXTS, server_config
from tests.support.tools import perf_analyzer_starts as starts
from tests.support.tools import require

WINDOW = 20


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    with BackgroundServer(server_config(tiny_bundle, http_port=0, queue_size=256), runner) as srv:
        yield srv


@pytest.mark.parametrize("concurrency", [1, 64])
def test_perf_analyzer_over_http_has_no_errors(http_server, tmp_path, concurrency):
    require(starts(), "perf_analyzer", "`make test` installs it (`make perf-analyzer-tools`)")
    with triton_http_client(http_server.http_address) as client:
        before = client.get_inference_statistics("translator")["model_stats"][0]
        data = perf_analyzer.write_input_data(TEXTS, tmp_path / "data.json")
        row = perf_analyzer.measure(http_server.http_address, data, concurrency, max(WINDOW, concurrency),
                                    tmp_path, protocol="http")
        after = client.get_inference_statistics("translator")["model_stats"][0]
    assert row.concurrency == concurrency and row.throughput > 0 and row.p50_ms > 0
    assert row.compute_ms > 0  # the server-side split comes from /stats
    successes = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    assert successes >= 3 * max(WINDOW, concurrency)
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"]
