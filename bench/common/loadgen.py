"""The one load generator of the benchmarks: a closed loop (and a Poisson open loop) over any client call,
the one `Record` of a request, and the `Summary` of a run.

A client is a `Call`: `call(i, lane)` sends request i (over connection `lane`, modulo the client's) and
returns its Record. bench/common/translator.py is the translator.v1 gRPC client; bench/protocols/clients.py
has one per protocol; the soak (bench/soak/run.py) and the repository benchmark (bench/repository/traffic.py)
wrap them. `summarize` turns a run's records into throughput (answered requests / elapsed, output tokens /
elapsed) and latency percentiles.

    records = asyncio.run(closed_loop(client.call, concurrency=8, requests=200))
    summary = summarize(records)  # Summary(ok=200, throughput=..., p50_ms=..., ...)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Record:
    """One request as the client saw it; times in seconds on the run's clock."""

    index: int
    start: float = 0.0
    latency: float = math.nan  # NaN unless answered OK
    ttft: float = math.nan  # NaN unless streamed and a piece arrived
    out_tokens: int = 0  # of the best hypothesis (0 unless OK)
    code: str = ""  # "OK" or the status name
    streamed: bool = False
    server_ms: tuple[float, float, float] = (math.nan,) * 3  # the server's timings: queue, compute, total
    end: float = math.nan  # when its answer or failure came
    # what the soak checks (bench/soak/calls.py): the request's kind and route, and its answers
    kind: str = ""
    method: str = ""
    details: str = ""  # the status message
    answers: int = 0  # terminal answers: a result or an error status (exactly 1 is right)
    problems: list[str] = field(default_factory=list)

    @property
    def waited_s(self) -> float:
        """Seconds from the send to the answer or failure, whatever it was."""
        return self.end - self.start


Call = Callable[[int, int], Awaitable[Record]]  # (request index, lane) -> its record


@dataclass
class Summary:
    """Throughput and latency of one run (latencies in milliseconds, NaN when nothing was answered)."""

    requests: int
    ok: int
    errors: dict[str, int]
    elapsed_s: float
    throughput: float  # answered requests (sentences) per second
    tokens_per_s: float  # output tokens per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    streamed: int
    offered_rate: float | None = None  # open loop: requests per second asked for


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 90, 99)) -> list[float]:
    """Percentiles (linear interpolation) of the finite values; NaN when there are none."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if not len(finite):
        return [math.nan] * len(qs)
    return [float(x) for x in np.percentile(finite, qs)]


def summarize(records: Sequence[Record], offered_rate: float | None = None) -> Summary:
    """Summary of a run: elapsed from the first send to the last answer (or failure)."""
    if not records:
        raise ValueError("no records to summarize")
    ok = [r for r in records if r.code == "OK"]
    t0 = min(r.start for r in records)
    ends = [r.start + (r.latency if math.isfinite(r.latency) else 0.0) for r in records]
    elapsed = max(max(ends) - t0, 1e-9)
    p50, p90, p99 = (1e3 * p for p in percentiles([r.latency for r in ok]))
    t50, t99 = (1e3 * p for p in percentiles([r.ttft for r in ok], (50, 99)))
    mean = 1e3 * float(np.mean([r.latency for r in ok])) if ok else math.nan
    errors = dict(Counter(r.code for r in records if r.code != "OK"))
    return Summary(
        requests=len(records), ok=len(ok), errors=errors, elapsed_s=elapsed,
        throughput=len(ok) / elapsed, tokens_per_s=sum(r.out_tokens for r in ok) / elapsed,
        p50_ms=p50, p90_ms=p90, p99_ms=p99, mean_ms=mean, ttft_p50_ms=t50, ttft_p99_ms=t99,
        streamed=sum(r.streamed for r in records), offered_rate=offered_rate,
    )


async def closed_loop(call: Call, concurrency: int, requests: int, stop: asyncio.Event | None = None,
                      limit_s: float | None = None) -> list[Record]:
    """`concurrency` users (lanes 0 ..), each sending its next request as soon as its previous one is
    answered, until `requests` are sent, `stop` is set or `limit_s` has passed (unfinished requests are
    then left out); the records by index."""
    if concurrency < 1 or requests < 1:
        raise ValueError(f"concurrency and requests must be >= 1: {concurrency}, {requests}")
    pending = iter(range(requests))  # shared by the users: each index is taken exactly once
    records: list[Record] = []

    async def user(lane: int) -> None:
        """Send requests back to back until none are left (or told to stop)."""
        for i in pending:
            if stop is not None and stop.is_set():
                return
            records.append(await call(i, lane))

    users = asyncio.gather(*(user(u) for u in range(min(concurrency, requests))))
    if limit_s is None:
        await users
    else:
        with contextlib.suppress(TimeoutError):  # what did not finish is left out: the caller counts it lost
            await asyncio.wait_for(users, limit_s)
    return sorted(records, key=lambda r: r.index)


def poisson_arrivals(rate: float, requests: int, seed: int = 0) -> list[float]:
    """Arrival times (s from the start) of a Poisson process of `rate` per second."""
    if rate <= 0 or requests < 1:
        raise ValueError(f"rate and requests must be positive: {rate}, {requests}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(requests):
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def open_loop(call: Call, arrivals: Sequence[float]) -> list[Record]:
    """Request i sent at arrivals[i] (s from now, over lane i) whatever the answers (an overloaded
    server queues or refuses them); returns when every request is answered or failed."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tasks = []
    for i, at in enumerate(arrivals):
        delay = t0 + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(call(i, i)))
    records = await asyncio.gather(*tasks)
    return sorted(records, key=lambda r: r.index)
