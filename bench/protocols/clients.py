"""The load generator's clients of one server, one per protocol, each a `Call`: `call(i, lane) -> Record`
(bench/common/loadgen.py).

    async with open_client("http-generate", addresses, texts, concurrency=8) as call:
        records = await closed_loop(call, concurrency=8, requests=200)

Request i sends `texts[i % len(texts)]`, one text per request, greedy, no options. gRPC clients spread
their users over connections as bench/common/translator.py does; HTTP clients hold one keep-alive connection
per user (as perf_analyzer's HTTP client does).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
from grpc import aio

from bench.common import translator
from bench.common.loadgen import Call, Record
from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc

MODEL = "translator"
# protocol -> what it calls (the chart's legend)
PROTOCOLS = {"grpc": "gRPC translator.v1 Translate", "kserve-grpc": "gRPC KServe v2 ModelInfer",
             "http-infer": "HTTP KServe v2 infer (JSON)", "http-generate": "HTTP generate (Triton)"}


def _record(i: int, start: float, code: str) -> Record:
    """A Record of request i sent at `start` (perf_counter) and finished now."""
    end = time.perf_counter()
    return Record(i, start, end - start if code == "OK" else math.nan, code=code, end=end)


def kserve_request(text: str) -> v2.ModelInferRequest:
    """ModelInfer of one text: TEXT, BYTES, shape [1]."""
    contents = v2.InferTensorContents(bytes_contents=[text.encode()])
    tensor = v2.ModelInferRequest.InferInputTensor(name="TEXT", datatype="BYTES", shape=[1],
                                                   contents=contents)
    return v2.ModelInferRequest(model_name=MODEL, inputs=[tensor])


def http_body(protocol: str, text: str) -> dict[str, Any]:
    """The JSON body of one text's request: KServe v2 infer or Triton's generate."""
    if protocol == "http-generate":
        return {"text_input": text}
    return {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [text]}]}


def http_path(protocol: str) -> str:
    """The URL path of a protocol's requests."""
    return f"/v2/models/{MODEL}/{'generate' if protocol == 'http-generate' else 'infer'}"


def answered(protocol: str, reply: Any) -> bool:
    """Whether a 200 reply holds a translation."""
    if protocol == "http-generate":
        return isinstance(reply, dict) and isinstance(reply.get("text_output"), str)
    return isinstance(reply, dict) and bool(reply.get("outputs"))


@contextlib.asynccontextmanager
async def _grpc(address: str, texts: Sequence[str], concurrency: int) -> AsyncIterator[Call]:
    """translator.v1 Translate through bench/common/translator.py's client."""
    n = math.ceil(concurrency / translator.STREAMS_PER_CHANNEL)
    async with translator.open_channels(address, n) as channels:
        yield translator.Client(channels, texts).call


@contextlib.asynccontextmanager
async def _kserve_grpc(address: str, texts: Sequence[str], concurrency: int) -> AsyncIterator[Call]:
    """KServe v2 ModelInfer over grpc.aio."""
    n = math.ceil(concurrency / translator.STREAMS_PER_CHANNEL)
    async with translator.open_channels(address, n) as channels:
        stubs = [v2_grpc.GRPCInferenceServiceStub(c) for c in channels]
        requests = [kserve_request(t) for t in texts]

        async def call(i: int, lane: int) -> Record:
            """Send request i over connection lane."""
            start, code = time.perf_counter(), "OK"
            try:
                reply = await stubs[lane % len(stubs)].ModelInfer(requests[i % len(requests)],
                                                                  timeout=translator.TIMEOUT_S)
                if not reply.outputs:
                    code = "NO_OUTPUT"
            except aio.AioRpcError as exc:
                code = exc.code().name
            return _record(i, start, code)

        yield call


@contextlib.asynccontextmanager
async def _http(protocol: str, address: str, texts: Sequence[str], concurrency: int) -> AsyncIterator[Call]:
    """KServe v2 REST infer or Triton's generate over aiohttp, one connection per user."""
    url = f"http://{address}{http_path(protocol)}"
    bodies = [http_body(protocol, t) for t in texts]
    timeout = aiohttp.ClientTimeout(total=translator.TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call(i: int, lane: int) -> Record:
            """Send request i (the session picks a free connection)."""
            start, code = time.perf_counter(), "OK"
            try:
                async with session.post(url, json=bodies[i % len(bodies)]) as response:
                    reply = await response.json()
                    if response.status != 200:
                        code = f"HTTP_{response.status}"
                    elif not answered(protocol, reply):
                        code = "NO_OUTPUT"
            except (aiohttp.ClientError, TimeoutError) as exc:
                code = type(exc).__name__
            return _record(i, start, code)

        yield call


def open_client(protocol: str, addresses: dict[str, str], texts: Sequence[str],
                concurrency: int) -> contextlib.AbstractAsyncContextManager[Call]:
    """A protocol's client (addresses: "grpc" and "http" host:port) for `concurrency` users."""
    if not texts:
        raise ValueError("no texts to send")
    if protocol == "grpc":
        return _grpc(addresses["grpc"], texts, concurrency)
    if protocol == "kserve-grpc":
        return _kserve_grpc(addresses["grpc"], texts, concurrency)
    if protocol in ("http-infer", "http-generate"):
        return _http(protocol, addresses["http"], texts, concurrency)
    raise ValueError(f"unknown protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
