"""Triton's generate extension through an independent client (aiohttp's): /generate answers the
reference translation; /generate_stream's server-sent events, parsed by the SSE rules, are the
pieces the gRPC stream (tritonclient.grpc) sends for the same text; errors before the first event
are JSON with their HTTP status, errors after it come inside the stream."""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_texts, reference_stream
from tests.support.http import TIMEOUT_S, parse_sse, post_json
from tests.support.kserve import text_input, triton_client
from tests.support.polling import wait_until
from tests.support.scheduling import Gate, gate_on
from tests.support.server import TEXTS, server_config

MAX_NEW = 12


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


def url(server: BackgroundServer, path: str) -> str:
    return f"http://{server.http_address}{path}"


def grpc_pieces(server: BackgroundServer, text: str, max_tokens: int) -> list[str]:
    """The pieces ModelStreamInfer streams for `text` (tritonclient.grpc), the final response aside."""
    items: queue.Queue = queue.Queue()
    with triton_client(server.address) as client:
        client.start_stream(callback=lambda result, error: items.put((result, error)))
        client.async_stream_infer("translator", [text_input([text])], parameters={
            "stream": True, "max_tokens": max_tokens}, enable_empty_final_response=True)
        pieces = []
        while True:
            result, error = items.get(timeout=TIMEOUT_S)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                return pieces
            pieces.append(result.as_numpy("TRANSLATION")[0].decode("utf-8"))


def test_generate_answers_the_reference(http_server, runner):
    """text_input in, text_output out, with the model's name and version; parameters decode as over
    gRPC (max_tokens, beam_size), in `parameters` or beside text_input as the extension allows."""
    for text in TEXTS:
        status, kind, body = post_json(url(http_server, "/v2/models/translator/generate"),
                                       {"text_input": text, "parameters": {"max_tokens": MAX_NEW}})
        assert (status, kind) == (200, "application/json"), body

        answer = json.loads(body)
        assert answer == {"model_name": "translator", "model_version": "1",
                          "text_output": best_texts(runner, [text],
                                                    DecodeOptions(max_output_tokens=MAX_NEW))[0]}
    status, _, body = post_json(url(http_server, "/v2/models/translator/versions/1/generate"),
                                {"text_input": TEXTS[1], "beam_size": 2, "max_tokens": 7})
    want = best_texts(runner, [TEXTS[1]], DecodeOptions(beam_size=2, max_output_tokens=7))[0]
    assert status == 200 and json.loads(body)["text_output"] == want


def test_generate_stream_events_are_the_grpc_stream_pieces(http_server, runner):
    """One SSE data event per piece, the same pieces as the gRPC stream's and the reference decoder's,
    joining into the translation."""
    for text in TEXTS:
        status, kind, body = post_json(url(http_server, "/v2/models/translator/generate_stream"),
                                       {"text_input": text, "parameters": {"max_tokens": MAX_NEW}})
        assert (status, kind) == (200, "text/event-stream"), body
        events = parse_sse(body)
        assert all(set(e) == {"model_name", "model_version", "text_output"} for e in events), events
        pieces = [e["text_output"] for e in events]
        want, full = reference_stream(runner, text, MAX_NEW)
        assert pieces == want == grpc_pieces(http_server, text, MAX_NEW)
        assert "".join(pieces) == full and len(pieces) > 1


def test_generate_errors_before_the_first_event_are_json(http_server):
    """Bad requests: 400 (or 404 for an unknown model) with a JSON error saying why, on both paths."""
    cases = [
        ("/v2/models/translator/{}", {"text": "x"}, 400, "text_input must be a string"),
        ("/v2/models/translator/{}", {"text_input": "x", "parameters": {"beam_size": 0}}, 400, "beam_size"),
        ("/v2/models/translator/{}", {"text_input": "x", "parameters": []}, 400, "parameters"),
        ("/v2/models/translator/{}", {"text_input": "x", "max_tokens": [1]}, 400, "max_tokens"),
        ("/v2/models/nope/{}", {"text_input": "x"}, 404, "unknown model"),
        ("/v2/models/translator/versions/7/{}", {"text_input": "x"}, 404, "version"),
    ]

    for endpoint in ("generate", "generate_stream"):
        for path, payload, status, phrase in cases:
            got, kind, body = post_json(url(http_server, path.format(endpoint)), payload)
            assert (got, kind) == (status, "application/json"), (endpoint, payload, body)
            assert phrase in json.loads(body)["error"], (endpoint, payload, body)


def test_an_error_after_the_first_event_comes_inside_the_stream(http_server, runner):
    """A decoder failure after some pieces were sent: status 200, the pieces, then {"error": ...};
    the server serves the next request."""
    failing = Gate(None, fail=lambda stage, n: stage == "decoder" and n == 4)
    with gate_on(runner, failing):
        status, kind, body = post_json(url(http_server, "/v2/models/translator/generate_stream"),
                                       {"text_input": TEXTS[3], "parameters": {"max_tokens": MAX_NEW}})
    assert (status, kind) == (200, "text/event-stream")
    events = parse_sse(body)
    assert len(events) >= 2 and all("text_output" in e for e in events[:-1]), events
    assert set(events[-1]) == {"error"} and "error id" in events[-1]["error"], events
    status, _, body = post_json(url(http_server, "/v2/models/translator/generate"), {"text_input": TEXTS[0]})
    assert status == 200, body


def test_concurrent_requests_of_both_endpoints_all_answer_right(http_server, runner):
    """Many generate and generate_stream requests at once on one connection pool, batched together:
    each gets its own reference answer, none is lost, the scheduler drains."""
    want = {t: best_texts(runner, [t], DecodeOptions(max_output_tokens=MAX_NEW))[0] for t in TEXTS}
    endpoints = ("generate", "generate_stream")
    jobs = [(text, endpoint) for _ in range(4) for text in TEXTS for endpoint in endpoints]

    async def one(session: aiohttp.ClientSession, text: str, endpoint: str) -> str:
        payload = {"text_input": text, "parameters": {"max_tokens": MAX_NEW}}
        path = f"/v2/models/translator/{endpoint}"
        async with session.post(url(http_server, path), json=payload) as answer:
            assert answer.status == 200, await answer.text()
            body = await answer.read()
        if endpoint == "generate":
            return json.loads(body)["text_output"]
        return "".join(e["text_output"] for e in parse_sse(body))

    async def run() -> list[str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
            return await asyncio.gather(*(one(session, t, e) for t, e in jobs))

    assert asyncio.run(run()) == [want[t] for t, _ in jobs]
    scheduler = http_server.running.scheduler
    wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0,
               "the scheduler to drain", TIMEOUT_S)
