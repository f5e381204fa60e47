"""bench.server.http_overhead: HTTP / gRPC ratios from perf_analyzer rows, and a quick run on the tiny bundle
(both protocols measured, the JSON written; without perf_analyzer: skipped, or failed under CI)."""

from __future__ import annotations

import json

import pytest

from bench.server import http_overhead
from bench.server.perf_analyzer import Row
from tests.support.tools import perf_analyzer_starts as starts
from tests.support.tools import require


def row(concurrency: int, throughput: float, p50: float) -> Row:
    return Row(concurrency, throughput, p50, p50, p50, p50, 0.0, 1.0)


def test_ratios_compare_http_with_grpc_at_the_ends():
    rows = {"grpc": [row(1, 100.0, 10.0), row(64, 400.0, 150.0)],
            "http": [row(1, 90.0, 12.0), row(64, 360.0, 170.0)]}
    want = {"throughput_ratio_at_max": 0.9, "p50_ratio_at_min": 1.2}
    assert http_overhead.ratios(rows) == pytest.approx(want)


def test_a_quick_run_measures_both_protocols(tiny_bundle, tmp_path, capsys):
    require(starts(), "perf_analyzer", "`make test` installs it (`make perf-analyzer-tools`)")
    out = tmp_path / "http.json"
    assert http_overhead.main(["--bundle", str(tiny_bundle), "--quick", "--sentences", "8",
                               "--max-trials", "8", "--json", str(out)]) == 0  # 8: stable beside the suite
    report = json.loads(out.read_text())
    levels = {p: [r["concurrency"] for r in rows] for p, rows in report["rows"].items()}
    assert levels == {"grpc": [1, 4], "http": [1, 4]}
    assert all(r["throughput"] > 0 for rows in report["rows"].values() for r in rows)
    assert report["throughput_ratio_at_max"] > 0 and report["p50_ratio_at_min"] > 0
    assert "HTTP / gRPC throughput" in capsys.readouterr().out
