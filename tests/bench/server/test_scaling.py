"""The scaling and memory benchmark (bench/server/scaling.py) at tiny sizes on the tiny bundle: lengths
capped at the bundle's, batches, and the server's RSS with its chart record (no timing claims)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.common.workload import Lengths
from bench.server import scaling


def test_scaling_bench_measures_lengths_batches_and_memory(tiny_bundle: Path, sources: list[str],
                                                          tmp_path: Path) -> None:
    plan = scaling.Plan(lengths=(8, 500), alone=2, together=3, batch_sizes=(1, 2), batch_sentences=4,
                        rss_requests=40, rss_every=20, rss_concurrency=4, max_batch_size=4,
                        intra_op_threads=1)
    scores, text = scaling.run_plan(plan, tiny_bundle, sources, log=lambda _: None, out=tmp_path)
    rss = json.loads((tmp_path / "scaling-rss.json").read_text(encoding="utf-8"))  # the chart's record
    assert rss["kind"] == "rss" and rss["warmup_requests"] == 20
    assert [r for r, _ in rss["samples"]] == [0, 20, 40]
    assert rss["samples"][-1][1] == pytest.approx(scores["rss_last_mib"], abs=0.05)
    assert (tmp_path / "scaling-rss.svg").stat().st_size > 0
    max_len = Lengths(tiny_bundle).max_len
    assert f"len{max_len}_alone_p50_ms" in scores and "len500_alone_p50_ms" not in scores  # capped
    assert scores["rss_answered"] == 40 and scores["rss_errors"] == 0
    assert scores["rss_peak_mib"] >= scores["rss_last_mib"] > 0
    assert scores["rss_drift_pct"] == pytest.approx(
        100 * (scores["rss_last_mib"] - scores["rss_warm_mib"]) / scores["rss_warm_mib"])
    assert scores["batch2_tokens_per_s"] > 0 and math.isfinite(scores["batch_max_vs_1_tokens_per_s"])
    assert "### Source length (in-process)" in text and "### Batch size (in-process)" in text
