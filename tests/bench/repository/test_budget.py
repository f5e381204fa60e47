"""The memory-budget benchmark (bench/repository/budget.py) at tiny sizes on the tiny bundle: every figure
written, every request answered, every unload an eviction; no timing claims."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.repository import budget
from tests.support.corpus import tiny_pairs


def test_the_churn_under_a_budget_of_about_two_models(tiny_bundle: Path, tmp_path: Path) -> None:
    texts = [s for s, _ in tiny_pairs(20, 5)]
    options = argparse.Namespace(budget_mib=None, rounds=2, requests=2, concurrency=1)
    got = budget.run_bundle(tiny_bundle, tmp_path / "repository", texts, options)
    json.dumps(got, allow_nan=False)
    assert len(got["charges_mib"]) == 2 and min(got["charges_mib"]) > 0
    assert got["budget_mib"] == budget.BUDGET_MODELS * min(got["charges_mib"])
    assert got["requests_sent"] == 2 * 3 * 2 and got["requests_lost"] == 0 and got["errors"] == []
    assert len(got["charges_at_loads_mib"]) == got["loads"] >= 3 and 1 <= got["loaded_at_end"] <= 3
    assert got["evictions"] == got["loads"] - got["loaded_at_end"]
    assert got["rss_samples"] > 0 and got["peak_above_fixed_mib"] >= got["final_above_fixed_mib"]
    assert got["peak_vs_budget"] == got["peak_above_fixed_mib"] / got["budget_mib"]
