"""Triton's generate extension: text in, text out, over HTTP only.

`POST /v2/models/{m}[/versions/{v}]/generate` with `{"text_input": "...", "parameters": {...}}` answers
`{"model_name", "model_version", "text_output"}`. `.../generate_stream` answers `text/event-stream;
charset=utf-8`: one server-sent event `data: {"model_name", "model_version", "text_output": <piece>}` per
piece of text as it is decoded (greedy decoding or sampling; the pieces join into the translation; with
beam_size > 1 one event with the whole best translation, known only at the end). A request that fails before
its first event gets a JSON error with its HTTP status; an error after it comes inside the stream as `data:
{"error": "..."}`, as the extension says, and ends it. A client that disconnects cancels its request: its rows
leave the batch.

Parameters (in `parameters`, or as other properties of the request object, as the extension allows) are the
options of docs/api.md, read by service/dataplane/parameters.py as for every protocol; an unknown name is
refused. generate also takes `n_best`, `return_alternatives`, `return_scores`, `return_alignment` and
`return_tokens`; with `required_phrases` the answer has `"unmet_required_phrases"` (the indexes of
those the best translation lacks; each hypothesis lists its own); with a `glossary`, or a text holding terms
of the model's, `"glossary_terms"` (the source terms the text holds) and `"unmet_glossary_terms"` (those the
best translation lacks; each hypothesis lists its own). With any of them the answer gains
`"hypotheses"` (each with `"text"`, `"token_ids"`, `"finish_reason"`, and `"score"` / `"log_prob"`,
`"alignment"`, `"tokens"` as asked), `"source_token_ids"` (with alignment or tokens), `"source_tokens"`
(with tokens), and with several hypotheses `"text_outputs"`.
generate_stream refuses them; with `required_phrases` it streams no pieces: one event with the whole text
and its `"unmet_required_phrases"`. With `"format"` (`text`, `html` or `markdown`; and `"protect"`, a list of
regular expressions) generate translates text_input as a whole document (service/dataplane/documents.py) and
adds `"segments"` and `"split"` to the answer, as the document route's headers say them (docs/documents.md);
generate_stream sends the document in parts, in order, each event's `text_output` a part as soon as it is
final, with `"done"` (segments final so far) and `"segments"` (their total).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web

from service.api.http.body import read_object
from service.api.http.context import model_of, plane_of
from service.api.http.errors import CODE_KEY, json_response
from service.api.status import http_status_of
from service.dataplane import parameters
from service.dataplane.calls import Final, Opened
from service.dataplane.documents import DocumentStart, document_parameters
from service.dataplane.rendering import Piece, Translation, Want, detected_fields
from service.domain.errors import InvalidInput
from service.domain.text import shown

TEXT_KEY = "text_input"
SSE_TYPE = "text/event-stream"


def generate_parameters(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The request's parameters: `parameters` and the body's other properties; the text checked."""
    if not isinstance(body.get(TEXT_KEY), str):
        raise InvalidInput(f"{TEXT_KEY} must be a string, got {shown(body.get(TEXT_KEY))}")
    given = body.get("parameters", {})
    if not isinstance(given, dict):
        raise InvalidInput(f"parameters must be a JSON object, got {shown(given)}")
    merged = {k: v for k, v in body.items() if k not in (TEXT_KEY, "parameters")} | given
    merged.pop(parameters.STREAM, None)  # the endpoint says whether to stream
    if stream:
        for key in parameters.RESULTS:
            if key in merged:
                raise InvalidInput(f"parameter {key} is generate's (one JSON answer); "
                                   "generate_stream streams "
                                   "the pieces of one translation")
    return merged


def _hypotheses(t: Translation) -> list[dict[str, Any]]:
    """The JSON hypotheses of a translation: its fields as shown, those not asked left out."""
    return [{k: str(v) if k == "finish_reason" else v for k, v in vars(h).items() if v is not None}
            for h in t.hypotheses]


def result_fields(t: Translation, asked: parameters.Asked) -> dict[str, Any]:
    """The answer's fields beyond model_name, model_version and text_output."""
    if not asked.extras:
        return {}
    out: dict[str, Any] = {}
    if (asked.n_best or 1) > 1 or asked.return_alternatives:
        out["text_outputs"] = [h.text for h in t.hypotheses]
    out["hypotheses"] = _hypotheses(t)
    if t.source_token_ids is not None:
        out["source_token_ids"] = t.source_token_ids
    if t.source_tokens is not None:
        out["source_tokens"] = t.source_tokens
    return out


async def generate(request: web.Request) -> web.Response:
    """One request, one JSON answer; with `format` (text, html, markdown) the text is a whole document."""
    body = await read_object(request, "generate request")
    given = generate_parameters(body, stream=False)
    if (document := document_parameters(given)) is not None:
        return await _document(request, body[TEXT_KEY], *document)
    asked = parameters.read(given, results=parameters.RESULTS)
    want = Want(tokens=asked.return_tokens, scores=asked.return_scores, alignment=asked.return_alignment)
    answer = await plane_of(request).translate(*model_of(request), [body[TEXT_KEY]], asked.decoding, want,
                                               asked.deadline)
    (result,) = answer.results
    payload = {"model_name": answer.model_name, "model_version": answer.model_version,
               "text_output": result.text}
    if asked.options.required_phrases:
        payload["unmet_required_phrases"] = result.unmet
    if result.detected is not None:  # source_language auto
        payload["detected_language"] = detected_fields(result.detected)
    if asked.options.glossary or result.glossary_terms:
        payload["glossary_terms"] = result.glossary_terms
        payload["unmet_glossary_terms"] = result.unmet_terms
    return json_response(payload | result_fields(result, asked))


async def _document(request: web.Request, text: str, fmt: str, protect: list[str], given: dict[str, Any]
                    ) -> web.Response:
    """generate of a document: `format` says how to read text_input, `protect` lists protected patterns."""
    asked = parameters.read(given)
    answer = await plane_of(request).document(*model_of(request), text, fmt, asked.decoding, protect,
                                              asked.deadline)
    return json_response({"model_name": answer.model_name, "model_version": answer.model_version,
                          "text_output": answer.text, "segments": answer.segments, "split": answer.split})


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object (JSON escapes newlines: one data line)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + text.encode("utf-8") + b"\n\n"


async def _events(items: Any, required: bool) -> Any:
    """The event payloads of a stream's items: one per piece with text, or the whole text when no piece
    was streamed (with `required` phrases, and their unmet ones, as generate answers them)."""
    model: dict[str, str] = {}
    async for item in items:
        if isinstance(item, Opened):
            model = {"model_name": item.model_name, "model_version": item.model_version}
        elif isinstance(item, Piece) and item.text:
            yield model | {"text_output": item.text}
        elif isinstance(item, Final) and not item.streamed and item.translation.text:
            unmet = {"unmet_required_phrases": item.translation.unmet} if required else {}
            yield model | {"text_output": item.translation.text} | unmet


async def _document_events(items: Any) -> Any:
    """The event payloads of a streamed document: one per part, in order (the parts join into the
    document), with the segments done and their total."""
    model: dict[str, Any] = {}
    async for item in items:
        if isinstance(item, DocumentStart):
            model = {"model_name": item.model_name, "model_version": item.model_version,
                     "segments": item.segments}
        else:
            yield model | {"text_output": item.text, "done": item.done}


async def generate_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events, one per decoded piece (with `format`, per part of the document as each is final);
    errors before the first as JSON, after it inside."""
    body = await read_object(request, "generate request")
    given = generate_parameters(body, stream=True)
    if (document := document_parameters(given)) is not None:
        fmt, protect, rest = document
        asked = parameters.read(rest)
        items = plane_of(request).document_stream(*model_of(request), body[TEXT_KEY], fmt, asked.decoding,
                                                  protect, asked.deadline)
        events = _document_events(items)
    else:
        asked = parameters.read(given)
        items = plane_of(request).stream(*model_of(request), body[TEXT_KEY], asked.options, Want(),
                                         asked.deadline)
        events = _events(items, bool(asked.options.required_phrases))
    async with contextlib.aclosing(items), contextlib.aclosing(events):  # closing abandons the text
        first = await anext(events, None)  # an error here is an ordinary JSON error
        stream = web.StreamResponse(headers={"Content-Type": f"{SSE_TYPE}; charset=utf-8",
                                             "Cache-Control": "no-cache"})
        await stream.prepare(request)
        try:
            event = first
            while event is not None:
                await stream.write(sse_event(event))
                event = await anext(events, None)
        except ConnectionError:
            raise  # the client went away: nobody to tell
        except Exception as exc:  # noqa: BLE001 - after the first event errors travel in the stream
            _, code, text = http_status_of(exc)
            request[CODE_KEY] = code
            await stream.write(sse_event({"error": text}))
        await stream.write_eof()
        return stream


def add_routes(app: web.Application) -> None:
    """Register generate and generate_stream, with and without a version."""
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/generate", generate)
        app.router.add_route("POST", prefix + "/generate_stream", generate_stream)
