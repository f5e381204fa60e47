"""The translator.v1 client of the load generator (bench/common/translator.py) against an in-process server
on the tiny bundle: closed and open loop answer every request once, and the summary is computed from the
records (no timing claims)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.common.loadgen import Record, summarize
from bench.common.translator import closed_loop_at, open_loop_at
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.server import server_config


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
        assert r.waited_s == pytest.approx(r.latency)  # answered: the end is start + latency
        queue, compute, total = r.server_ms
        assert queue >= 0 and compute > 0 and queue + compute <= total + 1e-6 and total <= 1e3 * r.latency
        if r.streamed:
            assert 0 < r.ttft <= r.latency
        else:
            assert math.isnan(r.ttft)


def test_closed_and_open_loop_answer_every_request_once(bench_server: BackgroundServer, runner: Runner,
                                                        sources: list[str]) -> None:
    texts = sources[:7]
    want = [len(h[0].tokens) for h in runner.translate(texts)]
    n = 23
    address = bench_server.address
    closed = asyncio.run(closed_loop_at(address, texts, concurrency=4, requests=n, stream_every=3))
    check_summary(closed, n)
    assert [r.streamed for r in closed] == [i % 3 == 0 for i in range(n)]
    assert [r.out_tokens for r in closed] == [want[i % len(texts)] for i in range(n)]
    opened = asyncio.run(open_loop_at(address, texts, rate=200.0, requests=n, seed=2, stream_every=1))
    check_summary(opened, n)
    assert all(r.streamed for r in opened)
    assert [r.out_tokens for r in opened] == [want[i % len(texts)] for i in range(n)]
    assert summarize(opened, offered_rate=200.0).offered_rate == 200.0
