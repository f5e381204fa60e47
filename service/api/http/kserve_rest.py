"""KServe v2 REST, as KServe's and Triton's protocol documents define it, on the KServe v2 servicer.

- `GET /v2` (server metadata), `GET /v2/health/live`, `GET /v2/health/ready` (200 true, 400 false,
  empty bodies, as the documents say);
- `GET /v2/models/{m}[/versions/{v}]` (model metadata), `.../ready`, Triton's `.../config` (the
  model configuration as JSON) and `.../stats`, `GET /v2/models/stats` (every model);
- `POST /v2/models/{m}[/versions/{v}]/infer`: JSON tensors, or Triton's binary tensor data
  (service/api/http/tensors.py);
- Triton's repository extension: `POST /v2/repository/index` (`{"ready": bool}`),
  `POST /v2/repository/models/{m}/load` (`{"parameters": {"config": "<JSON>"}}`), `.../unload`.
Each handler converts JSON to the servicer's protobuf request and its answer back, nothing more:
the servicer (service/api/kserve.py) does the work exactly as for gRPC.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from protos.inference import grpc_service_pb2 as pb
from service.api.http import tensors
from service.api.http.body import json_object, read_body
from service.api.http.errors import json_response
from service.api.kserve import InferenceServicer
from service.domain.errors import InvalidInput

EXTENSIONS = ["binary_tensor_data", "generate"]  # besides the servicer's (parameters, statistics, ...)
SERVICER_KEY = web.AppKey("kserve_servicer", InferenceServicer)


class Deadline:
    """What the servicer reads of a gRPC call's context: the time it has left (None: no deadline)."""

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline

    def time_remaining(self) -> float | None:
        """Seconds left, as grpc.aio's ServicerContext.time_remaining()."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())


def _model(request: web.Request) -> tuple[str, str]:
    """(model name, version or "") of the path."""
    return request.match_info["model"], request.match_info.get("version", "")


def _servicer(request: web.Request) -> InferenceServicer:
    return request.app[SERVICER_KEY]


def message_json(message: Message, empty_messages: bool = False) -> dict[str, Any]:
    """A protobuf message as Triton's REST JSON: field names as in the .proto, numbers as numbers
    (protobuf's JSON mapping writes 64-bit integers as strings), enums by name, every scalar and
    list field; message fields when set (all of them when `empty_messages`)."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        single_message = field.message_type is not None and not field.is_repeated
        if single_message and not empty_messages and not message.HasField(field.name):
            continue
        out[field.name] = _value_json(field, getattr(message, field.name), empty_messages)
    return out


def _value_json(field: Any, value: Any, empty_messages: bool) -> Any:
    """One field's value (map, repeated, message, enum or scalar) as JSON."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        item = field.message_type.fields_by_name["value"]
        return {key: _single_json(item, v, empty_messages) for key, v in value.items()}
    if field.is_repeated:
        return [_single_json(field, v, empty_messages) for v in value]
    return _single_json(field, value, empty_messages)


def _single_json(field: Any, value: Any, empty_messages: bool) -> Any:
    """A single (not repeated) value as JSON."""
    if field.message_type is not None:
        return message_json(value, empty_messages)
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    return value


async def server_live(request: web.Request) -> web.Response:
    """Live while the process answers."""
    return web.Response(status=200)


async def server_ready(request: web.Request) -> web.Response:
    """200 once the models to load at start serve, until draining; 400 otherwise."""
    ready = await _servicer(request).ServerReady(pb.ServerReadyRequest(), Deadline())
    return web.Response(status=200 if ready.ready else 400)


async def server_metadata(request: web.Request) -> web.Response:
    """Server name, version and the protocol extensions of both servers."""
    meta = await _servicer(request).ServerMetadata(pb.ServerMetadataRequest(), Deadline())
    return json_response({"name": meta.name, "version": meta.version,
                          "extensions": [*meta.extensions, *EXTENSIONS]})


async def model_ready(request: web.Request) -> web.Response:
    """200 when the model (version) is loaded and ready, 400 when not, 404 for one the repository lacks."""
    name, version = _model(request)
    ready = await _servicer(request).ModelReady(pb.ModelReadyRequest(name=name, version=version), Deadline())
    return web.Response(status=200 if ready.ready else 400)


async def model_metadata(request: web.Request) -> web.Response:
    """Name, versions, platform, inputs and outputs."""
    name, version = _model(request)
    meta = await _servicer(request).ModelMetadata(pb.ModelMetadataRequest(name=name, version=version),
                                                  Deadline())
    tensor = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.inputs]
    output = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.outputs]
    return json_response({"name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
                          "inputs": tensor, "outputs": output})


async def model_config(request: web.Request) -> web.Response:
    """Triton's model configuration as JSON (the servicer's ModelConfig)."""
    name, version = _model(request)
    answer = await _servicer(request).ModelConfig(pb.ModelConfigRequest(name=name, version=version),
                                                  Deadline())
    return json_response(message_json(answer.config))


async def model_stats(request: web.Request) -> web.Response:
    """Triton's statistics of the model named (every model's at /v2/models/stats)."""
    name = request.match_info.get("model", "")
    version = request.match_info.get("version", "")
    answer = await _servicer(request).ModelStatistics(
        pb.ModelStatisticsRequest(name=name, version=version), Deadline())
    return json_response(message_json(answer, empty_messages=True))


async def infer(request: web.Request) -> web.Response:
    """KServe v2 inference: JSON tensors, or Triton's binary tensor data."""
    name, version = _model(request)
    body = await read_body(request)
    decoded = tensors.infer_request(body, request.headers.get(tensors.HEADER_LENGTH), name, version,
                                    json_object)
    response = await _servicer(request).infer(decoded.message, decoded.deadline)
    payload, binary = tensors.infer_response(response, decoded.binary_output)
    if not decoded.binary_output:
        return json_response(payload)
    header = json_response(payload).body
    return web.Response(body=header + binary, content_type="application/octet-stream",
                        headers={tensors.HEADER_LENGTH: str(len(header))})


async def repository_index(request: web.Request) -> web.Response:
    """Every model of the repository with its state (`{"ready": true}`: the ready ones only)."""
    body = json_object(await read_body(request), "repository index request", empty_ok=True)
    ready = body.get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidInput(f"ready must be a boolean, got {ready!r:.80}")
    index = await _servicer(request).RepositoryIndex(pb.RepositoryIndexRequest(ready=ready), Deadline())
    return json_response([{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
                          for m in index.models])


async def _load_request(request: web.Request, message: Message) -> Message:
    """The repository request with the body's `parameters`."""
    body = json_object(await read_body(request), "repository request", empty_ok=True)
    tensors.set_parameters(message.parameters, body.get("parameters", {}), "repository request")
    return message


async def repository_load(request: web.Request) -> web.Response:
    """Load (or reload with no gap) a model; parameter `config`: JSON settings over its own."""
    name = request.match_info["model"]
    message = await _load_request(request, pb.RepositoryModelLoadRequest(model_name=name))
    await _servicer(request).RepositoryModelLoad(message, Deadline())
    return json_response({})


async def repository_unload(request: web.Request) -> web.Response:
    """Unload a model: new requests are refused, in-flight ones complete."""
    name = request.match_info["model"]
    message = await _load_request(request, pb.RepositoryModelUnloadRequest(model_name=name))
    await _servicer(request).RepositoryModelUnload(message, Deadline())
    return json_response({})


def add_routes(app: web.Application) -> None:
    """Register the KServe v2 REST routes (their paths are the metrics' method labels)."""
    add = app.router.add_route
    add("GET", "/v2", server_metadata)
    add("GET", "/v2/health/live", server_live)
    add("GET", "/v2/health/ready", server_ready)
    add("GET", "/v2/models/stats", model_stats)
    add("POST", "/v2/repository/index", repository_index)
    add("POST", "/v2/repository/models/{model}/load", repository_load)
    add("POST", "/v2/repository/models/{model}/unload", repository_unload)
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        add("GET", prefix, model_metadata)
        add("GET", prefix + "/ready", model_ready)
        add("GET", prefix + "/config", model_config)
        add("GET", prefix + "/stats", model_stats)
        add("POST", prefix + "/infer", infer)
