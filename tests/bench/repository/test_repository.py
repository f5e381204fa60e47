"""The repository benchmark at tiny sizes on the tiny bundle: every field written, every request accounted for
(sent == answered, refusals only for the cycled model while it was unloaded), no timing claims."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench.common.loadgen import Record
from bench.repository import __main__ as repository_bench
from bench.repository.cycles import account
from bench.repository.plan import QUICK
from bench.server import perf_analyzer
from tests.support.corpus import tiny_pairs

PLAN = replace(QUICK, concurrency=4, requests=12, warmup=2, rounds=1, cycles=3, warmup_cycles=2,
               cycle_requests=4, steady_concurrency=2, settle_s=0.05, perf_concurrency=(1,), perf_requests=5,
               max_output_tokens=8, large=False, large_cold=False)
HEADLINE = {"colocate_throughput_ratio", "colocate_rss_vs_allowed", "colocate_one_process_rss_mib",
            "colocate_two_processes_rss_mib", "fixed_cost_mib", "opus_colocate_throughput_ratio",
            "opus_colocate_rss_vs_allowed", "cold_first_request_s", "cold_second_request_ms",
            "opus_cold_first_request_s", "opus_ct2_load_s", "opus_cold_first_request_vs_ct2_load", "cycles",
            "cycles_rss_growth_pct_of_model", "opus_cycles_rss_growth_pct_of_model", "opus_cycles_model_mib",
            "cycles_requests_sent", "cycles_requests_answered",
            "cycles_refused_while_unloaded", "perf_analyzer_named_texts_per_s",
            "perf_analyzer_only_named_answered", "requests_lost"}


def _record(start: float, code: str, end: float) -> Record:
    """A request's record as the load generator writes it."""
    ok = code == "OK"
    return Record(0, start, end - start if ok else math.nan, math.nan, 3 if ok else 0, code, False, end=end)


def test_only_the_probe_may_be_refused_and_only_while_unloaded() -> None:
    windows = [(0.0, 1.0), (2.0, 3.0), (4.0, float("inf"))]
    kinds = {"steady": [_record(0.5, "OK", 0.6), _record(2.5, "UNAVAILABLE", 2.5)],
             "probe": [_record(0.5, "UNAVAILABLE", 0.5), _record(1.95, "NOT_FOUND", 2.01),
                       _record(1.5, "UNAVAILABLE", 1.6), _record(2.5, "INTERNAL", 2.6),
                       _record(1.2, "OK", 1.3)]}
    counts = account(kinds, windows, ("probe",))
    assert counts["steady"] == {"sent": 2, "answered": 1, "refused_while_unloaded": 0, "lost": 1,
                                "errors": {"UNAVAILABLE": 1}}
    assert counts["probe"] == {"sent": 5, "answered": 1, "refused_while_unloaded": 2, "lost": 2,
                               "errors": {"UNAVAILABLE": 2, "NOT_FOUND": 1, "INTERNAL": 1}}


@pytest.fixture(scope="module")
def results(tiny_bundle: Path) -> dict:
    """One tiny run on the tiny bundle (two copies, one process and two, cold load, cycles, perf_analyzer)."""
    texts = [s for s, _ in tiny_pairs(40, 5)]
    return repository_bench.measure(PLAN, tiny_bundle, texts, None, log=lambda _: None)


def test_colocation_answers_every_request(results: dict) -> None:
    got = results["colocate"]
    assert list(got) == ["default"]  # no opus-mt-shaped bundle asked for
    c = got["default"]
    assert c["requests_sent"] == c["requests_answered"] > 0 and c["requests_lost"] == 0
    (only,) = c["rounds"]
    for side in ("one_process", "two_processes"):
        s = only[side]
        assert s["sent"] == s["answered"] == 2 * (PLAN.warmup + PLAN.requests // 2)
        assert s["requests"] == PLAN.requests and not s["errors"] and len(s["per_model"]) == 2
        assert s["throughput"] > 0 and s["rss_mib"] > 0 and s["peak_rss_mib"] >= s["rss_mib"]
    assert c["fixed_cost_mib"] > 0
    assert c["rss_allowed_mib"] == c["two_processes_rss_mib"] - c["fixed_cost_mib"]
    assert c["throughput_ratio"] == only["throughput_ratio"] > 0 and c["rss_vs_allowed"] > 0


def test_the_cold_load_is_answered_and_timed(results: dict) -> None:
    cold = results["cold"]
    assert set(cold) == {"default", "rss_before_any_load_mib"}
    first = cold["default"]
    assert first["codes"] == ["OK", "OK"] and first["first_request_s"] > 0 and first["second_request_ms"] > 0
    assert first["ct2"] is None  # the tiny bundle has no CTranslate2 conversion beside it


def test_cycles_account_for_every_request(results: dict) -> None:
    c = results["cycles"]
    every = PLAN.warmup_cycles + PLAN.cycles
    assert c["cycles"] == PLAN.cycles == len(c["rss_samples_mib"]) and len(c["load_s"]) == every
    assert c["warmup_cycles"] == PLAN.warmup_cycles == len(c["rss_warmup_samples_mib"])
    assert c["rss_after_warmup_mib"] == c["rss_warmup_samples_mib"][-1]  # the growth counts from there
    assert c["final_index"] == {"cycled": "UNAVAILABLE", "steady": "READY"}
    for kind, counts in c["requests"].items():
        assert counts["lost"] == 0, (kind, counts)
        assert counts["sent"] == counts["answered"] + counts["refused_while_unloaded"]
    assert c["requests"]["cycled"]["answered"] == every * PLAN.cycle_requests
    assert c["requests"]["steady"]["refused_while_unloaded"] == 0 and c["requests"]["steady"]["sent"] > 0
    assert c["requests_sent"] == c["requests_answered"] + c["requests_refused_while_unloaded"]
    assert c["model_mib"] > 0 and math.isfinite(c["rss_growth_pct_of_model"])
    assert len(c["chart"]["samples"]) == every


def test_perf_analyzer_against_the_named_model(results: dict) -> None:
    p = results["perf_analyzer"]
    if not perf_analyzer.binary().exists():
        assert p["skipped"] and p["rows"] == []
        return
    assert p["skipped"] is None and [r["concurrency"] for r in p["rows"]] == list(PLAN.perf_concurrency)
    assert p["only_the_named_model_answered"] and p["inference_counts"]["named"] > 0


def test_headline_and_files(results: dict, tmp_path: Path) -> None:
    line = repository_bench.headline(results)
    assert set(line) == HEADLINE and line["requests_lost"] == 0 == results["requests_lost"]
    assert line["opus_colocate_throughput_ratio"] is None and line["opus_ct2_load_s"] is None
    refused = line["cycles_refused_while_unloaded"]
    assert line["cycles_requests_sent"] == line["cycles_requests_answered"] + refused
    json.dumps(line, allow_nan=False)  # one JSON line, no NaN
    paths = repository_bench.write(tmp_path, results)
    assert [p.name for p in paths] == ["repository.json", "repository-cycles-rss.json",
                                       "repository-cycles-rss.svg"]
    written = json.loads(paths[0].read_text(encoding="utf-8"))
    parts = {"source", "plan", "skipped", "colocate", "cold", "cycles", "perf_analyzer", "requests_lost"}
    assert parts <= set(written)
    assert any("opus-mt-shaped" in why for why in written["skipped"])
    chart = json.loads(paths[1].read_text(encoding="utf-8"))
    assert chart["kind"] == "rss" and len(chart["samples"]) == PLAN.warmup_cycles + PLAN.cycles
    assert paths[2].stat().st_size > 0
