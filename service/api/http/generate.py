"""Triton's generate extension: text in, text out, over HTTP only.

`POST /v2/models/{m}[/versions/{v}]/generate` with `{"text_input": "...", "parameters": {...}}`
answers `{"model_name", "model_version", "text_output"}`. `.../generate_stream` answers
`text/event-stream; charset=utf-8`: one server-sent event `data: {"model_name", "model_version",
"text_output": <piece>}` per piece of text as it is decoded (greedy; the pieces join into the
translation; with beam_size > 1 one event with the whole best translation, known only at the end).
A request that fails before its first event gets a JSON error with its HTTP status; an error after
it comes inside the stream as `data: {"error": "..."}`, as the extension says, and ends it.

Parameters (in `parameters`, or as other properties of the request object, as the extension
allows) are the KServe v2 ones, parsed by the same codec as gRPC: `max_tokens` /
`max_output_tokens`, `beam_size`, `source_language`, `target_language` and the controlled-decoding
options of docs/api.md (`target_prefix`, `suppress_sequences` as a JSON array, `temperature`, `top_p`,
`seed`, ...); unknown ones are ignored. generate_stream streams pieces for greedy decoding and sampling.
generate also takes translator.v1's `n_best`, `return_alternatives`, `return_scores`,
`return_alignment` and `return_tokens` and answers them as JSON (generate_results.py); generate_stream
refuses them. A client that disconnects cancels its request: its rows leave the batch.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from aiohttp import web

from protos.inference import grpc_service_pb2 as pb
from service.api import kserve, kserve_codec, kserve_parameters
from service.api.http import tensors
from service.api.http.body import json_object, read_body
from service.api.http.errors import CODE_KEY, json_response
from service.api.http.generate_results import Extras, pop_extras, refuse_in_stream, result_fields, with_extras
from service.api.http.kserve_rest import SERVICER_KEY
from service.api.kserve_codec import shown
from service.api.status import http_status_of
from service.domain.errors import InvalidInput

TEXT_KEY = "text_input"
SSE_TYPE = "text/event-stream"


def generate_request(request: web.Request, body: dict[str, Any], stream: bool
                     ) -> tuple[pb.ModelInferRequest, float | None, Extras]:
    """The one-text ModelInferRequest of a generate request, its deadline (`timeout`, µs) and what it asks
    beyond the best text (generate only)."""
    text = body.get(TEXT_KEY)
    if not isinstance(text, str):
        raise InvalidInput(f"{TEXT_KEY} must be a string, got {shown(text)}")
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidInput(f"parameters must be a JSON object, got {shown(parameters)}")
    merged = {k: v for k, v in body.items() if k not in (TEXT_KEY, "parameters")} | parameters
    merged.pop(kserve_parameters.STREAM_KEY, None)  # the endpoint says whether to stream
    if stream:
        refuse_in_stream(merged)
    extras = Extras() if stream else pop_extras(merged)
    deadline = None
    if tensors.TIMEOUT_KEY in merged:
        micros = merged.pop(tensors.TIMEOUT_KEY)
        if not isinstance(micros, int) or isinstance(micros, bool) or micros < 1:
            raise InvalidInput(f"parameter {tensors.TIMEOUT_KEY} must be a positive number of microseconds")
        deadline = time.monotonic() + micros / 1e6
    message = pb.ModelInferRequest(model_name=request.match_info["model"],
                                   model_version=request.match_info.get("version", ""))
    tensors.set_parameters(message.parameters, merged, "generate request")
    if stream:
        message.parameters[kserve_parameters.STREAM_KEY].bool_param = True
        message.parameters[kserve_parameters.EMPTY_FINAL_KEY].bool_param = True  # pieces only: no repeat
    tensor = message.inputs.add(name=kserve_codec.INPUT_NAME, datatype=kserve_codec.BYTES_DATATYPE, shape=[1])
    tensor.contents.bytes_contents.append(text.encode("utf-8", "surrogatepass"))
    return message, deadline, extras


def _output(response: pb.ModelInferResponse, text: str) -> dict[str, str]:
    """The generate response object."""
    return {"model_name": response.model_name, "model_version": response.model_version, "text_output": text}


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object (JSON escapes newlines: one data line)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + text.encode("utf-8") + b"\n\n"


async def generate(request: web.Request) -> web.Response:
    """One request, one JSON answer: the options parsed as for KServe v2, the scheduler's result."""
    body = json_object(await read_body(request), "generate request")
    message, deadline, extras = generate_request(request, body, stream=False)
    models = request.app[SERVICER_KEY].models
    async with models.use(message.model_name, message.model_version, deadline) as model:
        decoded = kserve_codec.decode_request(message)
        options = with_extras(kserve.decode_options(decoded.options, model.runner.max_len), extras)
        result = (await model.scheduler.submit(decoded.texts, options, deadline))[0]
        best = result.hypotheses[0].text if result.hypotheses else ""
        payload = {"model_name": message.model_name or model.name, "model_version": str(model.version),
                   "text_output": best}
        return json_response(payload | result_fields(result, extras, model.runner))


async def generate_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events, one per decoded piece; errors before the first as JSON, after it inside."""
    body = json_object(await read_body(request), "generate request")
    message, deadline, _ = generate_request(request, body, stream=True)
    responses = request.app[SERVICER_KEY].stream_responses(message, deadline)
    async with contextlib.aclosing(responses):  # closing it abandons the text in the scheduler
        first = await _next_with_text(responses)  # an error here is an ordinary JSON error
        stream = web.StreamResponse(headers={"Content-Type": f"{SSE_TYPE}; charset=utf-8",
                                             "Cache-Control": "no-cache"})
        await stream.prepare(request)
        try:
            item = first
            while item is not None:
                await stream.write(sse_event(_output(item[0], item[1])))
                item = await _next_with_text(responses)
        except ConnectionError:
            raise  # the client went away: nobody to tell
        except Exception as exc:  # noqa: BLE001 - after the first event errors travel in the stream
            _, code, text = http_status_of(exc)
            request[CODE_KEY] = code
            await stream.write(sse_event({"error": text}))
        await stream.write_eof()
        return stream


async def _next_with_text(responses: Any) -> tuple[pb.ModelInferResponse, str] | None:
    """The next response that carries text (the empty final one carries none), None at the end."""
    async for response in responses:
        text = "".join(tensors.texts_of(response))
        if text:
            return response, text
    return None


def add_routes(app: web.Application) -> None:
    """Register generate and generate_stream, with and without a version."""
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/generate", generate)
        app.router.add_route("POST", prefix + "/generate_stream", generate_stream)
