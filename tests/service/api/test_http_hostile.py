"""Hostile HTTP: malformed and oversized bodies, lying lengths (Content-Length and Triton's
Inference-Header-Content-Length), slow partial bodies and slow headers bounded by the read timeout
(a slowloris trickling bytes included), and clients that disconnect mid-request. Each gets 400 / 408
/ 413 with the reason (or a closed connection: headers, or a client that is gone); after
each the server still serves and nothing was lost: the scheduler's queue and active sequences
return to 0 (awaited, bounded) and the request metrics count the outcome."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_texts, best_tokens
from tests.support.http import TIMEOUT_S, first_response, post_json, raw_exchange
from tests.support.polling import wait_until
from tests.support.scheduling import Gate, gate_on
from tests.support.server import MESSAGE_LIMIT, TEXTS, server_config

READ_TIMEOUT_S = 1.0
INFER = "/v2/models/translator/infer"
STREAM = "/v2/models/translator/generate_stream"


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with a short HTTP read timeout (body limit: MESSAGE_LIMIT)."""
    config = server_config(tiny_bundle, http_port=0, http_read_timeout_s=READ_TIMEOUT_S)
    with BackgroundServer(config, runner) as srv:
        yield srv


def request_bytes(path: str, body: bytes, length: int | None = None, headers: str = "",
                  close: bool = True) -> bytes:
    """An HTTP/1.1 POST with `length` as its Content-Length (the true length by default); `close`:
    the server closes the connection after its answer."""
    length = len(body) if length is None else length
    headers += "Connection: close\r\n" if close else ""
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{headers}\r\n").encode() + body


def infer_body(texts: list[str]) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "shape": [len(texts)], "datatype": "BYTES",
                                   "data": texts}]}).encode()


def assert_serves_and_nothing_is_left(server: BackgroundServer, runner: Runner) -> None:
    """The scheduler drained (queue and active sequences 0, awaited) and a request is answered right."""
    scheduler = server.running.scheduler
    wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0,
               "the scheduler to have nothing queued or active", TIMEOUT_S)
    status, _, body = post_json(f"http://{server.http_address}/v2/models/translator/generate",
                                {"text_input": TEXTS[0]})
    assert status == 200 and json.loads(body)["text_output"] == best_texts(runner, TEXTS[:1])[0]


def error_of(raw: bytes) -> tuple[int, str]:
    """Status and JSON error message of the first response in `raw`."""
    status, headers, body = first_response(raw)
    assert headers["content-type"].startswith("application/json"), (status, headers, body)
    return status, json.loads(body)["error"]


@pytest.mark.parametrize(("body", "phrase"), [
    (b'{"inputs": [', "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * 30_000 + b"]" * 30_000, "not valid JSON"),
    (b'"just a string"', "must be a JSON object"),
    (b"", "not valid JSON"),
], ids=["truncated", "not-utf8", "deep-nesting", "not-an-object", "empty"])
def test_malformed_json_is_400_with_the_reason(http_server, runner, body, phrase):
    status, message = error_of(raw_exchange(http_server.http_address, request_bytes(INFER, body)))
    assert status == 400 and phrase in message, message
    assert_serves_and_nothing_is_left(http_server, runner)


def test_an_oversized_body_is_413_announced_or_not(http_server, runner):
    """A Content-Length over the limit is refused before the body is read; a chunked body (no length)
    as soon as it passes the limit."""
    big = b" " * (MESSAGE_LIMIT + 1)
    status, message = error_of(raw_exchange(http_server.http_address, request_bytes(INFER, big)))
    assert status == 413 and "at most" in message, message
    chunked = (f"POST {INFER} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"
               f"Connection: close\r\n\r\n{len(big):x}\r\n").encode() + big + b"\r\n0\r\n\r\n"
    status, message = error_of(raw_exchange(http_server.http_address, chunked))
    assert status == 413 and str(MESSAGE_LIMIT) in message, message
    assert_serves_and_nothing_is_left(http_server, runner)


def trickle(address: str, head: bytes, byte: bytes, pace_s: float = 0.05) -> tuple[bytes, bool]:
    """Send `head`, then `byte` every pace_s (a slowloris) until the server answers or closes, for at
    most TIMEOUT_S: (what the server sent, whether it closed the connection)."""
    host, port = address.rsplit(":", 1)
    received = b""
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(head)
        for _ in range(int(TIMEOUT_S / pace_s)):
            if select.select([sock], [], [], pace_s)[0]:  # the pace of the trickle, and the server's turn
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    return received, True
                if not chunk:
                    return received, True
                received += chunk
                continue
            try:
                sock.sendall(byte)
            except (BrokenPipeError, ConnectionResetError):
                return received, True
    return received, False


def test_a_body_shorter_than_its_content_length_times_out_as_408(http_server, runner):
    """A client that sends less than its Content-Length and waits: 408 with the reason once the read
    timeout passes, bounded, and the connection closes."""
    body = infer_body(TEXTS[:1])
    raw = raw_exchange(http_server.http_address, request_bytes(INFER, body[:-5], length=len(body)),
                       timeout=READ_TIMEOUT_S + TIMEOUT_S)
    status, message = error_of(raw)
    assert status == 408 and "did not arrive in full" in message and str(len(body)) in message, message
    assert first_response(raw)[1]["connection"].lower() == "close"
    assert_serves_and_nothing_is_left(http_server, runner)


def test_a_trickled_body_is_408_whatever_the_client_sends(http_server, runner):
    """A body sent a byte at a time, each well within the timeout: bytes do not extend the deadline,
    the request is answered 408 and the connection closed (within the read timeout and aiohttp's
    lingering close), the server serves on."""
    head = request_bytes(INFER, b'{"inputs": ', length=1 << 16, close=False)
    received, closed = trickle(http_server.http_address, head, b" ")
    status, message = error_of(received)
    assert status == 408 and "did not arrive in full" in message, message
    assert closed, received
    assert_serves_and_nothing_is_left(http_server, runner)


@pytest.mark.parametrize("head", [b"", b"POST /v2/models/translator/generate HTTP/1.1\r\nHost: test\r\n"],
                         ids=["nothing", "partial-headers"])
def test_slow_headers_are_closed_after_the_read_timeout(http_server, runner, head):
    """A connection that sends no request, or headers a byte at a time (never a whole request): the
    server closes it once the read timeout passes (bounded, bytes do not extend it), without a
    request reaching any handler; the server serves on."""
    before = metrics.counter_value(metrics.REQUESTS, protocol="http")
    received, closed = trickle(http_server.http_address, head, b"X" if head else b"")
    assert closed and received == b"", received
    assert metrics.counter_value(metrics.REQUESTS, protocol="http") == before
    assert_serves_and_nothing_is_left(http_server, runner)


def test_a_body_cut_short_by_the_client_is_400_or_dropped(http_server, runner):
    """A client that sends less than its Content-Length and closes its side: aiohttp takes the end of
    the input as the client gone and drops the connection (a 400 with the reason would do too); never
    a translation of half a body."""
    body = infer_body(TEXTS[:1])
    raw = raw_exchange(http_server.http_address, request_bytes(INFER, body[:-5], length=len(body)),
                       half_close=True)
    if raw:
        status, message = error_of(raw)
        assert status == 400, message
    assert_serves_and_nothing_is_left(http_server, runner)


def test_a_content_length_shorter_than_the_body_is_400(http_server, runner):
    """The server reads Content-Length bytes: a cut JSON document, 400 with the reason; the rest is
    no request (aiohttp answers it 400 and closes the connection)."""
    body = infer_body(TEXTS[:1])
    request = request_bytes(INFER, body, length=len(body) - 5, close=False)
    raw = raw_exchange(http_server.http_address, request)
    status, headers, answer = first_response(raw)
    assert status == 400 and b" 200 OK" not in raw, raw  # never a translation of a cut body
    if headers["content-type"].startswith("application/json"):  # the cut JSON was answered first
        assert "not valid JSON" in json.loads(answer)["error"], answer
    else:  # aiohttp's parser refused the rest before the handler answered
        assert b"Bad status line" in answer or b"Invalid method" in answer or b"Data after" in answer, raw
    assert_serves_and_nothing_is_left(http_server, runner)


@pytest.mark.parametrize(("header", "binary", "phrase"), [
    ("99999", b"", "but the body has only"),
    ("twelve", b"", "must be a byte count"),
    (None, b"\x01\x00\x00\x00a", "belong to no input"),
    (None, b"\x05\x00\x00\x00a", "truncated BYTES tensor"),
], ids=["header-too-long", "header-not-a-number", "extra-bytes", "element-too-long"])
def test_lying_binary_lengths_are_400(http_server, runner, header, binary, phrase):
    """Triton's binary tensor data with lengths that do not add up: 400 naming what is wrong."""
    size = len(binary) if phrase != "belong to no input" else 0
    tensor = {"name": "TEXT", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": size}}
    head = json.dumps({"inputs": [tensor]}).encode()
    if size == 0:
        tensor["parameters"]["binary_data_size"] = 0
    length = str(len(head)) if header is None else header
    raw = raw_exchange(http_server.http_address, request_bytes(
        INFER, head + binary, headers=f"Inference-Header-Content-Length: {length}\r\n"))
    status, message = error_of(raw)
    assert status == 400 and phrase in message, message
    assert_serves_and_nothing_is_left(http_server, runner)


def cancelled_count(path: str) -> float:
    return metrics.counter_value(metrics.REQUESTS, method=path, code="CANCELLED", protocol="http")


@pytest.mark.parametrize("endpoint", ["generate_stream", "generate"])
def test_a_client_that_disconnects_cancels_its_request(http_server, runner, endpoint):
    """The client goes away while its text decodes (the worker held at a decoder run): the request is
    cancelled, its row leaves the batch long before the text's full decode, the server serves on."""
    text = max([*TEXTS, "x", "we 7 big 1000000."], key=lambda t: len(best_tokens(runner, t, DecodeOptions())))
    full = len(best_tokens(runner, text, DecodeOptions()))
    assert full >= 8, "the test needs a text whose translation takes several steps"
    path = f"/v2/models/{{model}}/{endpoint}"
    before = cancelled_count(path)
    gate = Gate("decoder", at=(3,))
    with gate_on(runner, gate):
        body = json.dumps({"text_input": text}).encode()
        address = http_server.http_address.rsplit(":", 1)
        with socket.create_connection((address[0], int(address[1])), timeout=TIMEOUT_S) as sock:
            sock.sendall(request_bytes(f"/v2/models/translator/{endpoint}", body))
            if endpoint == "generate_stream":  # a first event comes before the client leaves
                received = b""
                while b"data: " not in received:
                    chunk = sock.recv(65536)
                    assert chunk, received
                    received += chunk
            gate.wait_held()
            assert http_server.running.scheduler.active_sequences == 1
        wait_until(lambda: cancelled_count(path) == before + 1, "the request counted CANCELLED", TIMEOUT_S)
        gate.release()
        wait_until(lambda: http_server.running.scheduler.active_sequences == 0, "the row to leave", TIMEOUT_S)
    assert gate.counts["decoder"] < full, (gate.counts, full)
    assert_serves_and_nothing_is_left(http_server, runner)
