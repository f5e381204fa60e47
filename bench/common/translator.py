"""translator.v1 over grpc.aio as the load generator's client (bench/common/loadgen.py), and its loops
against a server's address.

Request i translates `texts[i % len(texts)]`; with `stream_every=k` every k-th request (i % k == 0) goes
through `TranslateStream` (time to first token = first piece), the others through unary `Translate`
(0 = never stream, 1 = always). Every run sends exactly `requests` requests and stops by itself.

    records = asyncio.run(closed_loop_at("127.0.0.1:8001", texts, concurrency=8, requests=200))
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from grpc import aio

from bench.common.loadgen import Record, closed_loop, open_loop, poisson_arrivals
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

TIMEOUT_S = 120.0  # per-request deadline: a stuck server fails requests, never hangs the run
# Each channel its own connection (gRPC would otherwise share one between channels to the same
# address); a load spread over connections stays below the server's concurrent-stream limit.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 16 * 1024 * 1024),
                   ("grpc.use_local_subchannel_pool", 1)]
STREAMS_PER_CHANNEL = 32  # closed loop: users per connection
OPEN_LOOP_CHANNELS = 8  # open loop: connections, requests spread round-robin


class Client:
    """Prebuilt requests over grpc.aio channels; `call(i, lane)` sends request i over channel lane
    (default i) modulo their number, and returns its Record (times on the clock `t0`)."""

    def __init__(self, channels: Sequence[aio.Channel], texts: Sequence[str], stream_every: int = 0,
                 max_output_tokens: int = 0, timeout_s: float = TIMEOUT_S, beam_size: int = 0,
                 options: Mapping[str, Any] | None = None) -> None:
        if not texts or not channels:
            raise ValueError("no texts to send or no channel to send them over")
        if stream_every < 0:
            raise ValueError(f"stream_every must be >= 0, got {stream_every}")
        self.stubs = [pb_grpc.TranslatorStub(channel) for channel in channels]
        options = pb.TranslateOptions(max_output_tokens=max_output_tokens, beam_size=beam_size,
                                      **(options or {}))
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
        return Record(i, start - self.t0, latency, ttft, tokens, code, streamed, server_ms, end - self.t0)


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


async def closed_loop_at(address: str, texts: Sequence[str], concurrency: int, requests: int,
                         stream_every: int = 0, max_output_tokens: int = 0, timeout_s: float = TIMEOUT_S,
                         beam_size: int = 0, options: Mapping[str, Any] | None = None) -> list[Record]:
    """The closed loop (`concurrency` users, STREAMS_PER_CHANNEL to a connection) against a server
    (beam_size 0: the model's default; `options`: more TranslateOptions fields, e.g. the languages)."""
    if concurrency < 1 or requests < 1:
        raise ValueError(f"concurrency and requests must be >= 1: {concurrency}, {requests}")
    async with open_channels(address, math.ceil(concurrency / STREAMS_PER_CHANNEL)) as channels:
        client = Client(channels, texts, stream_every, max_output_tokens, timeout_s, beam_size, options)
        return await closed_loop(client.call, concurrency, requests)


async def open_loop_at(address: str, texts: Sequence[str], rate: float, requests: int, seed: int = 0,
                       stream_every: int = 0, max_output_tokens: int = 0,
                       timeout_s: float = TIMEOUT_S) -> list[Record]:
    """The open loop at Poisson arrival times of `rate` per second against a server (an overloaded server
    queues or refuses them with RESOURCE_EXHAUSTED), over OPEN_LOOP_CHANNELS connections."""
    arrivals = poisson_arrivals(rate, requests, seed)
    async with open_channels(address, OPEN_LOOP_CHANNELS) as channels:
        client = Client(channels, texts, stream_every, max_output_tokens, timeout_s)
        return await open_loop(client.call, arrivals)
