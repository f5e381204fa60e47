"""The one load generator (bench/common/loadgen.py) on stand-in calls: each request sent once, at most
`concurrency` in flight, stopped by an event or a time limit; summaries and Poisson arrivals."""

from __future__ import annotations

import asyncio
import math
import types
from collections.abc import Generator

import numpy as np
import pytest

from bench.common.loadgen import Record, closed_loop, open_loop, percentiles, poisson_arrivals, summarize


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


def test_the_closed_loop_sends_each_request_once_with_at_most_concurrency_in_flight() -> None:
    in_flight, peak, lanes = 0, 0, set()
    full = asyncio.Event()  # set once three calls are in flight: the first ones wait for it

    async def call(i: int, lane: int) -> Record:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        lanes.add(lane)
        if in_flight == 3:
            full.set()
        await full.wait()
        in_flight -= 1
        return Record(i, 0.0, 0.001, math.nan, 0, "OK", False)

    records = asyncio.run(closed_loop(call, 3, 10))
    assert [r.index for r in records] == list(range(10))
    assert peak == 3 and lanes == {0, 1, 2}
    with pytest.raises(ValueError):
        asyncio.run(closed_loop(call, 0, 10))


@types.coroutine
def _yield() -> Generator[None, None, None]:
    """Let the other tasks run once (what asyncio.sleep(0) does)."""
    yield


def test_the_closed_loop_stops_when_told_or_at_its_time_limit() -> None:
    """A set `stop` ends every user before its next request; at the time limit the unfinished requests are
    left out (the caller counts them as lost)."""
    async def stopped() -> list[Record]:
        stop = asyncio.Event()

        async def call(i: int, lane: int) -> Record:
            if i == 4:
                stop.set()
            await _yield()
            return Record(i, code="OK")
        return await closed_loop(call, 2, 1000, stop=stop)

    assert [r.index for r in asyncio.run(stopped())] == list(range(5))

    async def hangs_from_3(i: int, lane: int) -> Record:
        if i >= 3:
            await asyncio.Event().wait()  # never answered
        return Record(i, code="OK")

    records = asyncio.run(closed_loop(hangs_from_3, 1, 10, limit_s=0.2))
    assert [r.index for r in records] == [0, 1, 2]


def test_the_open_loop_sends_at_the_arrival_times_whatever_the_answers() -> None:
    async def run() -> tuple[list[Record], list[float]]:
        loop = asyncio.get_running_loop()
        t0, sent, all_sent = loop.time(), [], asyncio.Event()

        async def call(i: int, lane: int) -> Record:
            sent.append(loop.time() - t0)
            if len(sent) == 4:
                all_sent.set()
            await all_sent.wait()  # no answer comes before the last request is sent
            return Record(i, code="OK" if lane == i else "WRONG_LANE")
        return await open_loop(call, [0.0, 0.01, 0.02, 0.03]), sent

    records, sent = asyncio.run(run())
    assert [r.index for r in records] == [0, 1, 2, 3] and all(r.code == "OK" for r in records)
    assert sent == sorted(sent) and sent[-1] >= 0.03


def test_a_record_knows_how_long_its_request_waited() -> None:
    record = Record(0, start=1.5, end=2.0, code="DEADLINE_EXCEEDED")
    assert record.waited_s == pytest.approx(0.5) and math.isnan(record.latency)
    assert record.answers == 0 and record.problems == [] and record.kind == ""
