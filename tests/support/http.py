"""HTTP clients of the tests' servers: tritonclient.http, aiohttp's client with a server-sent events
reader, and raw sockets for requests no client library sends (lying lengths, cut bodies)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import numpy as np
import tritonclient.http as triton_http

TIMEOUT_S = 60.0


def text_input(texts: list[str], binary: bool) -> triton_http.InferInput:
    """A TEXT BYTES input of these texts, built by tritonclient.http (binary tensor data or JSON)."""
    tensor = triton_http.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_),
                               binary_data=binary)
    return tensor


@contextmanager
def triton_http_client(address: str) -> Iterator[triton_http.InferenceServerClient]:
    """tritonclient.http's client of host:port, unchanged; closed on exit."""
    client = triton_http.InferenceServerClient(url=address, network_timeout=TIMEOUT_S,
                                               connection_timeout=TIMEOUT_S)
    try:
        yield client
    finally:
        client.close()


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a text/event-stream body, by the SSE rules: events end at a blank line, an
    event's data is its `data:` lines joined by newlines (one optional space after the colon)."""
    events, data = [], []
    for line in raw.decode("utf-8").replace("\r\n", "\n").split("\n"):
        if not line:
            if data:
                events.append(json.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line.startswith(":"):  # comments aside, nothing else is expected
            raise AssertionError(f"unexpected SSE line {line!r}")
    assert not data, "the stream ended inside an event"
    return events


async def post(url: str, payload: Any) -> tuple[int, str, bytes]:
    """POST JSON with aiohttp's client: (status, content type, body)."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=payload) as answer:
        return answer.status, answer.content_type, await answer.read()


def post_json(url: str, payload: Any) -> tuple[int, str, bytes]:
    """`post` from a test thread (its own event loop; the server runs on the BackgroundServer's)."""
    return asyncio.run(post(url, payload))


def raw_exchange(address: str, data: bytes, half_close: bool = False, timeout: float = TIMEOUT_S) -> bytes:
    """Send raw bytes on a new connection and read until the server closes it or `timeout` passes;
    half_close: shut the write side after sending (the server sees the end of the body)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def first_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers lower-cased, body) of the first HTTP/1.1 response in `raw` (Content-Length
    framed)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", len(rest)))
    return status, headers, rest[:length]
