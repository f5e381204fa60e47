"""A grpc.aio load generator for translator.v1: closed loop and Poisson open loop, bounded.

Every run sends exactly `requests` requests and stops by itself. Request i translates
`texts[i % len(texts)]`; with `stream_every=k` every k-th request (i % k == 0) goes through
`TranslateStream` (time to first token = first piece), the others through unary `Translate`
(0 = never stream, 1 = always). Each request yields one `Record`; `summarize` turns them into
throughput (answered requests / elapsed, output tokens / elapsed) and latency percentiles.

    records = asyncio.run(closed_loop("127.0.0.1:8001", texts, concurrency=8, requests=200))
    summary = summarize(records)  # Summary(ok=200, throughput=..., p50_ms=..., ...)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import numpy as np
from grpc import aio

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

TIMEOUT_S = 120.0  # per-request deadline: a stuck server fails requests, never hangs the run
# Each channel its own connection (gRPC would otherwise share one between channels to the same
# address); a load spread over connections stays below the server's concurrent-stream limit.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 16 * 1024 * 1024),
                   ("grpc.use_local_subchannel_pool", 1)]
STREAMS_PER_CHANNEL = 32  # closed loop: users per connection
OPEN_LOOP_CHANNELS = 8  # open loop: connections, requests spread round-robin


@dataclass
class Record:
    """One request as the client saw it; times in seconds from the start of the run."""

    index: int
    start: float
    latency: float  # NaN unless answered OK
    ttft: float  # NaN unless streamed and a piece arrived
    out_tokens: int  # of the best hypothesis (0 unless OK)
    code: str  # "OK" or the gRPC status name
    streamed: bool
    server_ms: tuple[float, float, float] = (math.nan,) * 3  # the server's timings: queue, compute, total


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


class Client:
    """Prebuilt requests over grpc.aio channels; `call(i, lane)` sends request i over channel
    lane (default i) modulo their number, and returns its Record."""

    def __init__(self, channels: Sequence[aio.Channel], texts: Sequence[str], stream_every: int = 0,
                 max_output_tokens: int = 0, timeout_s: float = TIMEOUT_S, beam_size: int = 0) -> None:
        if not texts or not channels:
            raise ValueError("no texts to send or no channel to send them over")
        if stream_every < 0:
            raise ValueError(f"stream_every must be >= 0, got {stream_every}")
        self.stubs = [pb_grpc.TranslatorStub(channel) for channel in channels]
        options = pb.TranslateOptions(max_output_tokens=max_output_tokens, beam_size=beam_size)
        self.unary = [pb.TranslateRequest(texts=[t], options=options) for t in texts]
        self.stream = [pb.TranslateStreamRequest(text=t, options=options) for t in texts]
        self.stream_every, self.timeout_s = stream_every, timeout_s
        self.t0 = time.perf_counter()

    def streamed(self, i: int) -> bool:
        """Whether request i goes through TranslateStream."""
        return self.stream_every > 0 and i % self.stream_every == 0

    async def call(self, i: int, lane: int | None = None) -> Record:
        """Send request i, wait for its answer (or failure)."""
        k = i % len(self.unary)
        stub = self.stubs[(i if lane is None else lane) % len(self.stubs)]
        streamed = self.streamed(i)
        start = time.perf_counter()
        ttft, tokens, code = math.nan, 0, "OK"
        try:
            if streamed:
                result = None
                async for message in stub.TranslateStream(self.stream[k], timeout=self.timeout_s):
                    if message.HasField("piece"):
                        if math.isnan(ttft):
                            ttft = time.perf_counter() - start
                    else:
                        result = message.result
                if result is None:
                    raise RuntimeError("the stream ended without a result")
            else:
                response = await stub.Translate(self.unary[k], timeout=self.timeout_s)
                (result,) = response.results
            tokens = len(result.hypotheses[0].token_ids)
            timings = result.timings
            server_ms = (timings.queue_ms, timings.compute_ms, timings.total_ms)
        except aio.AioRpcError as exc:
            code, server_ms = exc.code().name, (math.nan,) * 3
        end = time.perf_counter()
        latency = end - start if code == "OK" else math.nan
        return Record(i, start - self.t0, latency, ttft, tokens, code, streamed, server_ms)


def open_channel(address: str) -> aio.Channel:
    """An insecure grpc.aio channel to address, on a connection of its own."""
    return aio.insecure_channel(address, options=CHANNEL_OPTIONS)


@contextlib.asynccontextmanager
async def open_channels(address: str, n: int) -> AsyncIterator[list[aio.Channel]]:
    """n channels to address (n connections), closed on exit."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_channel(address)) for _ in range(max(1, n))]


async def wait_ready(address: str, timeout_s: float = 60.0) -> None:
    """Until the server answers GetModelInfo (bounded)."""
    async with open_channel(address) as channel:
        await asyncio.wait_for(channel.channel_ready(), timeout_s)
        await pb_grpc.TranslatorStub(channel).GetModelInfo(pb.GetModelInfoRequest(), timeout=timeout_s)


async def closed_loop(address: str, texts: Sequence[str], concurrency: int, requests: int,
                      stream_every: int = 0, max_output_tokens: int = 0,
                      timeout_s: float = TIMEOUT_S, beam_size: int = 0) -> list[Record]:
    """`concurrency` users, each sending its next request as soon as its previous one is answered
    (beam_size 0: the model's default)."""
    if concurrency < 1 or requests < 1:
        raise ValueError(f"concurrency and requests must be >= 1: {concurrency}, {requests}")
    async with open_channels(address, math.ceil(concurrency / STREAMS_PER_CHANNEL)) as channels:
        client = Client(channels, texts, stream_every, max_output_tokens, timeout_s, beam_size)
        pending = iter(range(requests))  # shared by the users: each index is taken exactly once
        records: list[Record] = []

        async def user(u: int) -> None:
            """Send requests back to back over channel u until none are left."""
            for i in pending:
                records.append(await client.call(i, u))

        await asyncio.gather(*(user(u) for u in range(min(concurrency, requests))))
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


async def open_loop(address: str, texts: Sequence[str], rate: float, requests: int, seed: int = 0,
                    stream_every: int = 0, max_output_tokens: int = 0,
                    timeout_s: float = TIMEOUT_S) -> list[Record]:
    """Requests sent at Poisson arrival times whatever the answers (an overloaded server queues
    or refuses them with RESOURCE_EXHAUSTED); returns when every request is answered or failed."""
    arrivals = poisson_arrivals(rate, requests, seed)
    async with open_channels(address, OPEN_LOOP_CHANNELS) as channels:
        client = Client(channels, texts, stream_every, max_output_tokens, timeout_s)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        tasks = []
        for i, at in enumerate(arrivals):
            delay = t0 + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(client.call(i)))
        records = await asyncio.gather(*tasks)
    return sorted(records, key=lambda r: r.index)


def is_overloaded(summary: Summary) -> bool:
    """An open-loop run the server could not keep up with (refusals, or answers well below the offer)."""
    if summary.offered_rate is None:
        return False
    return bool(summary.errors) or summary.throughput < 0.9 * summary.offered_rate
