"""Large request bodies are decoded off the event loop (service/api/offload.py): while one large body's
decoding is held (the JSON decoder patched to wait for an event), health and readiness calls over both
protocols, which share the loop, are answered; released, the large request gets the answer its small twin
gets. Small bodies are decoded inline, on the loop. No timing is asserted: a decoding on the loop would
block it, and the health call would fail by its client's timeout."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.http as triton_http

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from service.api import offload
from service.api.http import body as http_body
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_texts
from tests.support.http import TIMEOUT_S, text_input
from tests.support.server import TEXTS, server_config

HEALTH_TIMEOUT_S = 20.0  # a bound, not a measurement: a blocked loop fails the health call after it
PAD = b" " * (offload.INLINE_BYTES + 1)  # JSON whitespace that makes a body large, its meaning unchanged
MODEL = "/v2/models/translator"


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """Both ports, bodies up to 1 MiB (room for large ones)."""
    config = server_config(tiny_bundle, http_port=0, max_message_bytes=1 << 20)
    with BackgroundServer(config, runner) as srv:
        yield srv


class HeldDecoder:
    """The HTTP JSON decoder, patched: records the thread of each decoding; while `holding`, the first
    decoding waits for `release` (bounded) after setting `entered`."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original
        self.holding = False
        self.entered, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []

    def __call__(self, raw: bytes, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        if self.holding:
            self.holding = False
            self.entered.set()
            self.release.wait(TIMEOUT_S)
        return self.original(raw, *args, **kwargs)


@pytest.fixture
def decoder(monkeypatch) -> Iterator[HeldDecoder]:
    """body.parse_json (every handler's JSON decoding) patched with a HeldDecoder; released at the end."""
    held = HeldDecoder(http_body.parse_json)
    monkeypatch.setattr(http_body, "parse_json", held)
    yield held
    held.release.set()


def post(server: BackgroundServer, path: str, body: bytes,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One POST: (status, headers lower-cased, body)."""
    host, port = server.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        sent = {"Content-Type": "application/json"} | (headers or {})
        connection.request("POST", path, body=body, headers=sent)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def ready_over_http(server: BackgroundServer) -> int:
    """GET /v2/health/ready's status, within HEALTH_TIMEOUT_S."""
    host, port = server.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=HEALTH_TIMEOUT_S)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status
    finally:
        connection.close()


def ready_over_grpc(server: BackgroundServer) -> bool:
    """ServerReady over gRPC (the same event loop), within HEALTH_TIMEOUT_S."""
    with grpc.insecure_channel(server.address) as channel:
        stub = v2_grpc.GRPCInferenceServiceStub(channel)
        return stub.ServerReady(v2.ServerReadyRequest(), timeout=HEALTH_TIMEOUT_S).ready


def infer_json(texts: list[str]) -> bytes:
    tensor = {"name": "TEXT", "shape": [len(texts)], "datatype": "BYTES", "data": texts}
    return json.dumps({"inputs": [tensor]}).encode()


def infer_binary(texts: list[str], pad: bytes) -> tuple[bytes, dict[str, str]]:
    """Triton's binary tensor data as tritonclient.http builds it, its JSON header padded with `pad`."""
    request_body, length = triton_http.InferenceServerClient.generate_request_body([text_input(texts, True)])
    header, data = request_body[:length] + pad, request_body[length:]
    headers = {"Content-Type": "application/octet-stream",
               "Inference-Header-Content-Length": str(len(header))}
    return header + data, headers


def translations(status: int, headers: dict[str, str], raw: bytes) -> list[str]:
    """The TRANSLATION texts of an infer answer, JSON or binary."""
    assert status == 200, raw
    length = headers.get("inference-header-content-length")
    if length is None:
        return json.loads(raw)["outputs"][0]["data"]
    result = triton_http.InferenceServerClient.parse_response_body(raw, header_length=int(length))
    return [t.decode() for t in result.as_numpy("TRANSLATION")]


# name -> (path, body of the request, extra headers), given the padding to append to its JSON
REQUESTS: dict[str, Callable[[bytes], tuple[str, bytes, dict[str, str]]]] = {
    "infer": lambda pad: (MODEL + "/infer", infer_json(TEXTS[:2]) + pad, {}),
    "infer-binary": lambda pad: (MODEL + "/infer", *infer_binary(TEXTS[:2], pad)),
    "generate": lambda pad: (MODEL + "/generate", json.dumps({"text_input": TEXTS[1]}).encode() + pad, {}),
    "score": lambda pad: (MODEL + "/score",
                          json.dumps({"source": TEXTS[0], "target": TEXTS[2]}).encode() + pad, {}),
    "repository-index": lambda pad: ("/v2/repository/index", b'{"ready": true}' + pad, {}),
}


def answer_of(name: str, status: int, headers: dict[str, str], raw: bytes) -> Any:
    """What an answer says, comparable between a small body and its large twin."""
    assert status == 200, (name, raw)
    return translations(status, headers, raw) if name.startswith("infer") else json.loads(raw)


@pytest.mark.parametrize("name", list(REQUESTS))
def test_the_loop_answers_while_a_large_body_is_decoded(http_server, runner, decoder, name):
    """A large body's decoding held in its thread: readiness over HTTP and gRPC is answered meanwhile, the
    large request is still waiting; released, it gets the answer of the same request sent small."""
    path, small, headers = REQUESTS[name](b"")
    expected = answer_of(name, *post(http_server, path, small, headers))
    assert not decoder.threads[-1].startswith("request-decode")  # a small body: decoded on the loop
    path, large, headers = REQUESTS[name](PAD)
    assert len(large) > offload.INLINE_BYTES
    decoder.holding = True
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post, http_server, path, large, headers)
        try:
            assert decoder.entered.wait(TIMEOUT_S), "the large body was never decoded"
            assert decoder.threads[-1].startswith("request-decode"), decoder.threads
            assert ready_over_http(http_server) == 200
            assert ready_over_grpc(http_server)
            assert not pending.done()  # still held: the answers above came while it was being decoded
        finally:
            decoder.release.set()
        assert answer_of(name, *pending.result(TIMEOUT_S)) == expected
    if name in ("infer", "generate"):
        texts = TEXTS[:2] if name == "infer" else TEXTS[1:2]
        got = expected if name == "infer" else [expected["text_output"]]
        assert got == best_texts(runner, texts)


def test_a_large_body_that_is_not_json_is_still_400(http_server, decoder):
    """Errors of a body decoded in a thread come back as from the loop: 400 with the parser's reason."""
    status, _, raw = post(http_server, MODEL + "/generate", b'{"text_input": ' + PAD)
    assert status == 400 and "not valid JSON" in json.loads(raw)["error"], raw
    assert decoder.threads[-1].startswith("request-decode")


# ----- the rule itself --------------------------------------------------------------------------
def _where() -> str:
    return threading.current_thread().name


def _fail() -> None:
    raise ValueError("no")


def test_small_bodies_decode_inline_and_large_ones_in_a_decoding_thread():
    async def both() -> tuple[str, str, str]:
        small = await offload.decoded(offload.INLINE_BYTES, _where)
        large = await offload.decoded(offload.INLINE_BYTES + 1, _where)
        return small, large, _where()

    small, large, loop = asyncio.run(both())
    assert small == loop and large.startswith("request-decode") and large != loop
    assert not offload.off_loop(offload.INLINE_BYTES) and offload.off_loop(offload.INLINE_BYTES + 1)
    with pytest.raises(ValueError, match="no"):
        asyncio.run(offload.decoded(offload.INLINE_BYTES + 1, _fail))
