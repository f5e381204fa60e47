"""The benchmarks' results as chart records: the format the charts read, written with their source."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

from bench.charts import from_results, record
from bench.families.engines import CT2, CT2_INT8, ORT, ORT_INT8
from bench.families.servers import CT2_TEXT, CT2_TEXT_INT8, SERVER, SERVER_INT8
from tests.support.svg import read_svg


def _summary(throughput: float, p99: float) -> SimpleNamespace:
    """A loadgen Summary's figures."""
    return SimpleNamespace(requests=10, throughput=throughput, tokens_per_s=10 * throughput, p50_ms=p99 / 2,
                           p90_ms=p99 * 0.8, p99_ms=p99, ttft_p50_ms=math.nan, ttft_p99_ms=math.nan)


def test_server_results_become_points_and_charts(tmp_path):
    def closed(k: int) -> dict:
        """Closed-loop points at concurrency 1 and 8."""
        return {("sentences", c): SimpleNamespace(summary=_summary(k * c, 5.0 * c)) for c in (1, 8)}
    results = {mode: SimpleNamespace(closed=closed(k)) for k, mode in enumerate(("continuous", "none"), 1)}
    data = from_results.server(results)
    assert [(p["mode"], p["concurrency"], p["throughput"], p["p99_ms"]) for p in data["points"]] == [
        ("continuous", 1, 1, 5.0), ("continuous", 8, 8, 40.0), ("none", 1, 2, 5.0), ("none", 8, 16, 40.0)]
    paths = record.write(tmp_path, "server", "server", data, command="python -m bench --quick")
    assert [p.name for p in paths] == ["server.json", "server-latency-throughput.svg", "server-ttft.svg"]
    saved = json.loads(paths[0].read_text(encoding="utf-8"))
    assert saved["kind"] == "server" and saved["source"]["command"] == "python -m bench --quick"
    assert "CPU cores" in saved["source"]["machine"] and saved["source"]["date"].endswith("UTC")
    assert {"sentences-none-p99", "sentences-continuous-p50"} <= read_svg(paths[1]).ids


def test_rss_runs_become_samples_after_the_warmup():
    run = {"started_mib": 100.04, "peak_mib": 195.0, "samples": [184.0, 187.2, 189.0]}
    scaled = from_results.scaling_rss(run, every=1000)
    assert scaled["warmup_requests"] == 1000 and scaled["started_mib"] == 100.0
    assert scaled["samples"] == [[0, 184.0], [1000, 187.2], [2000, 189.0]]  # the first at the warm-up's end
    soak = from_results.soak_rss([210.0, 211.0, 212.0, 213.0], requests=400, warmup=100, warm_mib=200.0,
                                 end_mib=213.0)
    assert soak["samples"] == [[100, 210.0], [200, 211.0], [300, 212.0], [400, 213.0]]
    assert soak["warmup_requests"] == 100 and soak["warm_mib"] == 200.0


def test_family_results_become_one_entry_per_engine():
    names = (ORT, CT2, ORT_INT8, CT2_INT8, SERVER, CT2_TEXT, SERVER_INT8, CT2_TEXT_INT8)  # bench.families'
    points = [SimpleNamespace(engine=n, batch=b, sentences_per_s=float(i * 10 + b))
              for i, n in enumerate(names) for b in (1, 32)]
    memory = {"load": {"rss_mib": 1.0}, "warm": {"rss_mib": 2.0}, "batch": {"rss_mib": 3.0}}
    footprint = {"disk_bytes": dict.fromkeys(names[:4], 75_600_000),
                 "memory_mib": dict.fromkeys(names[:4], memory)}
    data = from_results.family_engines(points, footprint, 32)
    first, last = data["engines"][0], data["engines"][-1]
    assert [e["name"] for e in data["engines"]] == ["ours fp32", "CTranslate2 float32", "ours int8",
                                                    "CTranslate2 int8"]
    assert first["engine"] == {"1": 1.0, "32": 32.0} and first["server"] == {"1": 41.0, "32": 72.0}
    assert last["server"] == {"1": 71.0, "32": 102.0}  # CTranslate2 int8 on text
    assert first["disk_mb"] == 75.6 and first["memory_mib"] == {"load": 1.0, "warm": 2.0, "batch": 3.0}
    assert "disk_mb" not in from_results.family_engines(points, {}, 32)["engines"][0]
