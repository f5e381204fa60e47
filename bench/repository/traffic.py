"""Requests that name a model: closed loops over several (server, model) targets at once, loops that run
until told to stop, and single timed requests (translator.v1 Translate with `model` set).

Every target gets bench/common/translator.py's `Client` with its requests addressed to the target's model,
driven by the closed loop of bench/common/loadgen.py; all of one run's records share one clock (`start`
and `end` in seconds from the run's start), so `summarize` of their union gives the run's throughput over
every target.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from grpc import aio

from bench.common.loadgen import Record, closed_loop
from bench.common.translator import TIMEOUT_S, Client, open_channel
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

ERROR_PAUSE_S = 0.02  # a loop's pause after a refused request (refusals come back at once)


@dataclass(frozen=True)
class Target:
    """A model on a server: `model` "" is the server's one model; beam_size 0 is the model's default."""

    address: str
    model: str = ""
    max_output_tokens: int = 0
    beam_size: int = 0


def model_client(channel: aio.Channel, texts: Sequence[str], target: Target, t0: float,
                 timeout_s: float = TIMEOUT_S) -> Client:
    """The translator Client over one channel, its requests naming the target's model, on the clock t0."""
    client = Client([channel], texts, 0, target.max_output_tokens, timeout_s)
    for request in client.unary:
        request.model = target.model
        request.options.beam_size = target.beam_size
    client.t0 = t0
    return client


async def closed_loops(targets: Sequence[Target], texts: Sequence[str], concurrency: int,
                       requests: int) -> list[list[Record]]:
    """`concurrency` users per target sending `requests` requests per target, all targets at once (one
    connection per target); each target's records, on one clock."""
    if concurrency < 1 or requests < 1:
        raise ValueError(f"concurrency and requests must be >= 1: {concurrency}, {requests}")
    t0 = time.perf_counter()
    async with contextlib.AsyncExitStack() as stack:
        channels = [await stack.enter_async_context(open_channel(t.address)) for t in targets]
        clients = [model_client(c, texts, t, t0) for c, t in zip(channels, targets, strict=True)]
        loops = [closed_loop(client.call, concurrency, requests) for client in clients]
        return list(await asyncio.gather(*loops))


async def loop_until(stop: asyncio.Event, target: Target, texts: Sequence[str], concurrency: int,
                     t0: float, limit: int = 1_000_000) -> list[Record]:
    """Users sending requests back to back to the target until `stop` is set (at most `limit`), each
    request's record on the clock t0; a refused request is followed by a short pause."""
    async with open_channel(target.address) as channel:
        client = model_client(channel, texts, target, t0)

        async def call(i: int, lane: int) -> Record:
            """Send request i; pause after a refusal."""
            record = await client.call(i, lane)
            if record.code != "OK":
                await asyncio.sleep(ERROR_PAUSE_S)
            return record

        return await closed_loop(call, concurrency, limit, stop=stop)


async def timed_requests(target: Target, text: str, n: int = 2,
                         timeout_s: float = TIMEOUT_S) -> list[tuple[float, str]]:
    """n Translate requests one after the other on one connection made first: (seconds, status) each."""
    async with open_channel(target.address) as channel:
        await asyncio.wait_for(channel.channel_ready(), timeout_s)
        stub = pb_grpc.TranslatorStub(channel)
        request = pb.TranslateRequest(texts=[text], model=target.model, options=pb.TranslateOptions(
            max_output_tokens=target.max_output_tokens, beam_size=target.beam_size))
        out = []
        for _ in range(n):
            start, code = time.perf_counter(), "OK"
            try:
                await stub.Translate(request, timeout=timeout_s)
            except Exception as exc:  # grpc.aio.AioRpcError: its status name
                code = exc.code().name if hasattr(exc, "code") else type(exc).__name__
            out.append((time.perf_counter() - start, code))
    return out
