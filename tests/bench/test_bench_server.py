"""The server and scaling benchmarks at tiny sizes on the tiny bundle: every request answered once,
counts, percentiles and throughput consistent with the records, ratios finite (no timing claims)."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench import perf_analyzer, scaling
from bench import server as server_bench
from bench.loadgen import Record, closed_loop, open_loop, percentiles, poisson_arrivals, summarize
from bench.workload import Lengths, mixed_texts, sources_of_length
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.corpus import tiny_pairs
from tests.support.server import server_config

MAX_NEW = 12


@pytest.fixture(scope="module")
def sources() -> list[str]:
    """Source sentences of the tiny task."""
    return [s for s, _ in tiny_pairs(60, 11)]


@pytest.fixture(scope="module")
def bench_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """An in-process continuous-batching server on a free loopback port, 4 rows."""
    with BackgroundServer(server_config(tiny_bundle, max_batch_size=4), runner) as srv:
        yield srv


def check_summary(records: list[Record], n: int) -> None:
    """Every request answered exactly once and the summary computed from the records."""
    assert [r.index for r in records] == list(range(n))
    assert all(r.code == "OK" for r in records)
    s = summarize(records)
    assert (s.requests, s.ok, s.errors) == (n, n, {})
    t0 = min(r.start for r in records)
    elapsed = max(r.start + r.latency for r in records) - t0
    assert s.elapsed_s == pytest.approx(elapsed)
    assert s.throughput == pytest.approx(n / elapsed)
    assert s.tokens_per_s == pytest.approx(sum(r.out_tokens for r in records) / elapsed)
    assert 0 < s.p50_ms <= s.p90_ms <= s.p99_ms <= 1e3 * max(r.latency for r in records) + 1e-9
    assert s.p50_ms == pytest.approx(1e3 * float(np.percentile([r.latency for r in records], 50)))
    for r in records:
        queue, compute, total = r.server_ms
        assert queue >= 0 and compute > 0 and queue + compute <= total + 1e-6 and total <= 1e3 * r.latency
        if r.streamed:
            assert 0 < r.ttft <= r.latency
        else:
            assert math.isnan(r.ttft)


def test_summary_of_known_records() -> None:
    records = [Record(i, 0.1 * i, 0.01 * (i + 1), math.nan, 3, "OK", False) for i in range(10)]
    records.append(Record(10, 0.2, math.nan, math.nan, 0, "RESOURCE_EXHAUSTED", False))
    s = summarize(records, offered_rate=5.0)
    assert (s.requests, s.ok, s.errors, s.streamed) == (11, 10, {"RESOURCE_EXHAUSTED": 1}, 0)
    assert s.elapsed_s == pytest.approx(0.9 + 0.1)  # the last one started at 0.9 and took 0.1
    assert s.throughput == pytest.approx(10.0) and s.tokens_per_s == pytest.approx(30.0)
    assert s.p50_ms == pytest.approx(55.0) and s.p99_ms == pytest.approx(99.1)
    assert s.mean_ms == pytest.approx(55.0)
    assert math.isnan(s.ttft_p50_ms) and s.offered_rate == 5.0
    assert all(math.isnan(x) for x in percentiles([math.nan, math.inf]))


def test_poisson_arrivals_are_deterministic_with_the_rate_as_mean() -> None:
    times = poisson_arrivals(50.0, 20_000, seed=3)
    assert times == poisson_arrivals(50.0, 20_000, seed=3) != poisson_arrivals(50.0, 20_000, seed=4)
    gaps = np.diff(times)
    assert times[0] == 0.0 and (gaps > 0).all()
    assert np.mean(gaps) == pytest.approx(1 / 50.0, rel=0.05)
    assert np.std(gaps) == pytest.approx(1 / 50.0, rel=0.05)  # exponential: std == mean
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 10)


def test_workloads_follow_the_bundle_tokenizer(tiny_bundle: Path, sources: list[str]) -> None:
    lengths = Lengths(tiny_bundle)
    mixed = mixed_texts(sources, 40, lengths, seed=1)
    assert mixed == mixed_texts(sources, 40, lengths, seed=1) and len(mixed) == 40
    assert all(lengths(t) <= lengths.max_len for t in mixed)
    assert max(lengths(t) for t in mixed) > max(lengths(s) for s in sources)  # some joined sentences
    for tokens in (2, 17, lengths.max_len):
        ids = sources_of_length(sources, tokens, 3, lengths)
        assert [len(x) for x in ids] == [tokens] * 3 and all(x[-1] == lengths.eos for x in ids)


def test_closed_and_open_loop_answer_every_request_once(bench_server: BackgroundServer, runner: Runner,
                                                        sources: list[str]) -> None:
    texts = sources[:7]
    want = [len(h[0].tokens) for h in runner.translate(texts)]
    n = 23
    closed = asyncio.run(closed_loop(bench_server.address, texts, concurrency=4, requests=n, stream_every=3))
    check_summary(closed, n)
    assert [r.streamed for r in closed] == [i % 3 == 0 for i in range(n)]
    assert [r.out_tokens for r in closed] == [want[i % len(texts)] for i in range(n)]
    address = bench_server.address
    opened = asyncio.run(open_loop(address, texts, rate=200.0, requests=n, seed=2, stream_every=1))
    check_summary(opened, n)
    assert all(r.streamed for r in opened)
    assert [r.out_tokens for r in opened] == [want[i % len(texts)] for i in range(n)]
    assert summarize(opened, offered_rate=200.0).offered_rate == 200.0


def test_server_bench_measures_every_mode(tiny_bundle: Path, sources: list[str]) -> None:
    plan = server_bench.Plan(concurrencies=(1, 4), min_requests=6, per_user=2, rate_fractions=(0.5,),
                             open_requests=(6, 6), c1_requests=3, mix_texts=12, warmup_requests=2,
                             max_batch_size=4, intra_op_threads=1, headline_concurrency=4,
                             headline_requests=10,
                             variants=(("continuous-2rows", "continuous", ("--max-batch-size", "2")),))
    workloads = {"sentences": sources, "mix": mixed_texts(sources, plan.mix_texts, Lengths(tiny_bundle))}
    results = server_bench.measure(plan, tiny_bundle, workloads, log=lambda _: None)
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
    scores = server_bench.ratios(results | {"continuous-2rows": tail}, c=4)
    for key in ("continuous_vs_none_c64", "continuous_vs_dynamic_mixed", "server_c1_vs_inprocess"):
        assert math.isfinite(scores[key]) and scores[key] > 0
    c4 = {m: results[m].closed["sentences", 4].summary.throughput for m in results}
    assert scores["continuous_vs_none_c64"] == pytest.approx(c4["continuous"] / c4["none"])
    assert scores["continuous_2rows_vs_dynamic_mixed"] == pytest.approx(
        tp.summary.throughput / results["dynamic"].closed["mix", 4].summary.throughput)
    assert scores["dynamic_vs_continuous_2rows_p99_mixed"] > 0 and scores["continuous_2rows_vs_none_c64"] > 0
    assert "continuous-2rows_c1_vs_inprocess" not in scores
    text = server_bench.tables(results | {"continuous-2rows": tail}, scores)
    assert "### Closed loop" in text and "| sentences | 4 | none |" in text
    assert "| mix | 4 | continuous-2rows |" in text
    assert "| server_c1_vs_inprocess |" in text


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


def test_concurrency_1_takes_the_client_with_less_cpu_per_request() -> None:
    r = server_bench.ModeResult("continuous", c1_server_ms=[4.0, 6.0, 5.0], c1_inprocess_ms=[3.0, 2.0, 4.0],
                                c1_loadgen_cpu_ms=0.4)
    assert r.c1_client == ("loadgen", 5.0) and r.c1_ratio == 3.0 / 5.0  # perf_analyzer not run
    r.c1_perf_analyzer = (4.0, 0.1)
    assert r.c1_client == ("perf_analyzer", 4.0) and r.c1_ratio == 3.0 / 4.0
    r.c1_perf_analyzer = (4.0, 0.5)
    assert r.c1_client == ("loadgen", 5.0)
