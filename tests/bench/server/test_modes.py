"""The server benchmark (bench/server/modes.py) at tiny sizes on the tiny bundle: every mode and variant
measured, every request answered once, ratios finite and those of the points (no timing claims)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from bench.common.workload import Lengths, mixed_texts
from bench.server import modes, perf_analyzer


def test_server_bench_measures_every_mode(tiny_bundle: Path, sources: list[str]) -> None:
    plan = modes.Plan(concurrencies=(1, 4), min_requests=6, per_user=2, rate_fractions=(0.5,),
                             open_requests=(6, 6), c1_requests=3, mix_texts=12, warmup_requests=2,
                             max_batch_size=4, intra_op_threads=1, headline_concurrency=4,
                             headline_requests=10,
                             variants=(("continuous-2rows", "continuous", ("--max-batch-size", "2")),))
    workloads = {"sentences": sources, "mix": mixed_texts(sources, plan.mix_texts, Lengths(tiny_bundle))}
    results = modes.measure(plan, tiny_bundle, workloads, log=lambda _: None)
    assert list(results) == ["continuous", "dynamic", "none", "continuous-2rows"]
    assert plan.requests_at(1) == 6 and plan.requests_at(4) == 10
    tail = results.pop("continuous-2rows")  # a variant: the headline concurrency only, every workload
    assert list(tail.closed) == [("sentences", 4), ("mix", 4)] and not tail.open and math.isnan(tail.c1_ratio)
    for tp in tail.closed.values():
        assert tp.summary.ok == 10 and not tp.summary.errors and 1 <= tp.rows_per_step <= 2
    for mode, r in results.items():
        assert len(r.c1_inprocess_ms) == len(r.c1_server_ms) == 3 and r.c1_ratio > 0
        assert r.c1_loadgen_cpu_ms > 0
        if perf_analyzer.binary().exists():  # `make test` installs it
            p50, cpu = r.c1_perf_analyzer
            assert p50 > 0 and cpu > 0
            assert r.c1_client == (("perf_analyzer", p50) if cpu < r.c1_loadgen_cpu_ms
                                   else ("loadgen", statistics.median(r.c1_server_ms)))
        assert set(r.closed) == {(w, c) for w in ("sentences", "mix") for c in (1, 4)}
        for (_, c), p in r.closed.items():
            s = p.summary
            assert s.requests == s.ok == plan.requests_at(c) and not s.errors
            assert s.p50_ms <= s.p90_ms <= s.p99_ms and s.throughput > 0
            assert 1 <= p.rows_per_step <= (1 if mode == "none" else plan.max_batch_size)
            assert p.step_ms > 0 and p.encoder_ms > 0
        (p,) = r.open
        assert p.summary.requests == 6 and p.summary.offered_rate > 0
        assert r.peak_rss_mib > 0
    # the open-loop rate is a fraction of the continuous mode's peak on the first workload
    peak = max(p.summary.throughput for (w, _), p in results["continuous"].closed.items() if w == "sentences")
    assert results["none"].open[0].summary.offered_rate == pytest.approx(0.5 * peak)
    scores = modes.ratios(results | {"continuous-2rows": tail}, c=4)
    for key in ("continuous_vs_none_c64", "continuous_vs_dynamic_mixed", "server_c1_vs_inprocess"):
        assert math.isfinite(scores[key]) and scores[key] > 0
    c4 = {m: results[m].closed["sentences", 4].summary.throughput for m in results}
    assert scores["continuous_vs_none_c64"] == pytest.approx(c4["continuous"] / c4["none"])
    assert scores["continuous_2rows_vs_dynamic_mixed"] == pytest.approx(
        tp.summary.throughput / results["dynamic"].closed["mix", 4].summary.throughput)
    assert scores["dynamic_vs_continuous_2rows_p99_mixed"] > 0 and scores["continuous_2rows_vs_none_c64"] > 0
    assert "continuous-2rows_c1_vs_inprocess" not in scores
    text = modes.tables(results | {"continuous-2rows": tail}, scores)
    assert "### Closed loop" in text and "| sentences | 4 | none |" in text
    assert "| mix | 4 | continuous-2rows |" in text
    assert "| server_c1_vs_inprocess |" in text


def test_concurrency_1_takes_the_client_with_less_cpu_per_request() -> None:
    r = modes.ModeResult("continuous", c1_server_ms=[4.0, 6.0, 5.0], c1_inprocess_ms=[3.0, 2.0, 4.0],
                                c1_loadgen_cpu_ms=0.4)
    assert r.c1_client == ("loadgen", 5.0) and r.c1_ratio == 3.0 / 5.0  # perf_analyzer not run
    r.c1_perf_analyzer = (4.0, 0.1)
    assert r.c1_client == ("perf_analyzer", 4.0) and r.c1_ratio == 3.0 / 4.0
    r.c1_perf_analyzer = (4.0, 0.5)
    assert r.c1_client == ("loadgen", 5.0)
