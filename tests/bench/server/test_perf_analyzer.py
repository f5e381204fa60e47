"""bench/server/perf_analyzer.py without the binary: its input data file and the parsing of its csv report
(the tool's runner, tests/support/perf_analyzer.py)."""

from __future__ import annotations

import pytest

from bench.server import perf_analyzer


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
