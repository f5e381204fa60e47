"""Send one HTTP soak case with aiohttp's client and read its answer as bench/soak/calls.py reads a
gRPC one: exactly one terminal answer (a result, a JSON error with its status, or an error event
inside a server-sent event stream), its code as the server's metrics name it, and the reference
result for valid requests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp
import tritonclient.http as triton_http

from bench.common.loadgen import Record
from bench.soak.case import HTTP_GENERATE, HTTP_GENERATE_STREAM, Case, score_problems
from bench.soak.http_cases import HEADER_LENGTH, HttpRequest

# HTTP status -> the status table's gRPC name (service/api/status.py; 503 is told apart by its message)
CODES = {200: "OK", 400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
         408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 499: "CANCELLED", 500: "INTERNAL",
         504: "DEADLINE_EXCEEDED"}


@dataclass
class HttpClient:
    """An aiohttp session and the server's base URL."""

    session: aiohttp.ClientSession
    base: str  # http://host:port


def code_of(status: int, message: str) -> str:
    """The gRPC name of an HTTP error: 503 is a full queue (RESOURCE_EXHAUSTED) or a server going
    away (UNAVAILABLE), as its message says."""
    if status == 503:
        return "RESOURCE_EXHAUSTED" if "queue is full" in message else "UNAVAILABLE"
    return CODES.get(status, f"HTTP {status}")


def stream_error_code(message: str) -> str:
    """The gRPC name of an error that came inside a generate_stream (its HTTP status was already 200)."""
    for phrase, code in (("error id", "INTERNAL"), ("queue is full", "RESOURCE_EXHAUSTED"),
                         ("deadline", "DEADLINE_EXCEEDED")):
        if phrase in message:
            return code
    return "UNAVAILABLE"


def _texts(case: Case, answer: aiohttp.ClientResponse, raw: bytes) -> list[str]:
    """The translations of a 200 answer: infer's TRANSLATION (JSON or binary data), generate's text."""
    if case.method == HTTP_GENERATE:
        return [json.loads(raw)["text_output"]]
    header_length = answer.headers.get(HEADER_LENGTH)
    if header_length is not None:  # binary tensor data: tritonclient.http reads it
        result = triton_http.InferenceServerClient.parse_response_body(raw, header_length=int(header_length))
        return [t.decode("utf-8") for t in result.as_numpy("TRANSLATION")]
    return json.loads(raw)["outputs"][0]["data"]


async def _events(answer: aiohttp.ClientResponse) -> Any:
    """The JSON objects of a text/event-stream, by the SSE rules, as they arrive."""
    data: list[str] = []
    async for raw_line in answer.content:
        line = raw_line.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield json.loads("\n".join(data))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        raise ValueError("the event stream ended inside an event")


async def _stream(case: Case, answer: aiohttp.ClientResponse, record: Record) -> None:
    """generate_stream's events: pieces, then the end of the stream or one error event (or the client
    leaves after `cancel_after` pieces)."""
    pieces: list[str] = []
    async for event in _events(answer):
        if record.answers:
            record.problems.append("an event after the stream's error")
        if "error" in event:
            record.code, record.details, record.answers = stream_error_code(event["error"]), event["error"], 1
            continue
        pieces.append(event["text_output"])
        if case.cancel_after and len(pieces) >= case.cancel_after:
            answer.close()  # the client goes away mid-stream: the server cancels the request
            record.code, record.answers = "CANCELLED", 1
            return
    if not record.answers:
        record.code, record.answers = "OK", 1
        if "".join(pieces) != case.references[0].text:
            record.problems.append(f"the streamed pieces {''.join(pieces)[:60]!r} differ from decoding alone "
                                   f"{case.references[0].text[:60]!r}")


async def send_http(case: Case, client: HttpClient, record: Record) -> None:
    """POST the case's request and read its one terminal answer into `record`."""
    request: HttpRequest = case.request
    timeout = aiohttp.ClientTimeout(total=case.deadline_s)
    async with client.session.post(client.base + request.path, data=request.body, headers=request.headers,
                                   timeout=timeout) as answer:
        if answer.status == 200 and case.method == HTTP_GENERATE_STREAM:
            if answer.content_type != "text/event-stream":
                record.problems.append(f"generate_stream answered {answer.content_type}")
            await _stream(case, answer, record)
            return
        raw = await answer.read()
        if answer.status != 200:
            if answer.content_type != "application/json":
                record.problems.append(f"HTTP {answer.status} with a {answer.content_type} body {raw[:99]!r}")
                message = raw.decode("utf-8", "replace")
            else:
                message = json.loads(raw)["error"]
            record.code, record.details, record.answers = code_of(answer.status, message), message, 1
            return
        record.code, record.answers = "OK", 1
        if case.scores:
            got = [(r["token_ids"], r["log_prob"], r["end_token_scored"]) for r in json.loads(raw)["results"]]
            record.problems += score_problems(got, case.scores)
        elif case.references:
            texts = _texts(case, answer, raw)
            if texts != [r.text for r in case.references]:
                record.problems.append(f"{case.kind} texts {texts} differ from decoding alone")
