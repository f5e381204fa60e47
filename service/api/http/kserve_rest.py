"""KServe v2 REST, as KServe's and Triton's protocol documents define it, on the data plane.

- `GET /v2` (server metadata), `GET /v2/health/live`, `GET /v2/health/ready` (200 true, 400 false,
  empty bodies, as the documents say);
- `GET /v2/models/{m}[/versions/{v}]` (model metadata), `.../ready`, Triton's `.../config` (the
  model configuration as JSON) and `.../stats`, `GET /v2/models/stats` (every model);
- `POST /v2/models/{m}[/versions/{v}]/infer`: JSON tensors, or Triton's binary tensor data
  (service/api/http/tensors.py);
- Triton's repository extension: `POST /v2/repository/index` (`{"ready": bool}`),
  `POST /v2/repository/models/{m}/load` (`{"parameters": {"config": "<JSON>"}}`), `.../unload`.
Each handler converts JSON to a call of the data plane (service/dataplane/calls.py) and its answer back,
nothing more; a large body is decoded off the event loop (service/api/offload.py), as in every handler.
"""

from __future__ import annotations

from aiohttp import web

from service.api import offload
from service.api.http import tensors
from service.api.http.body import json_object, read_body, read_object
from service.api.http.context import model_of, plane_of
from service.api.http.errors import json_response
from service.domain.errors import InvalidInput
from service.domain.text import shown

EXTENSIONS = ["binary_tensor_data", "generate"]  # besides the data plane's (parameters, statistics, ...)


async def server_live(request: web.Request) -> web.Response:
    """Live while the process answers."""
    return web.Response(status=200)


async def server_ready(request: web.Request) -> web.Response:
    """200 once the models to load at start serve, until draining; 400 otherwise."""
    return web.Response(status=200 if plane_of(request).ready() else 400)


async def server_metadata(request: web.Request) -> web.Response:
    """Server name, version and the protocol extensions of both transports."""
    meta = plane_of(request).server_metadata()
    return json_response(meta | {"extensions": [*meta["extensions"], *EXTENSIONS]})


async def model_ready(request: web.Request) -> web.Response:
    """200 when the model (version) is loaded and ready, 400 when not, 404 for one the repository lacks."""
    return web.Response(status=200 if plane_of(request).model_ready(*model_of(request)) else 400)


async def model_metadata(request: web.Request) -> web.Response:
    """Name, versions, platform, inputs and outputs."""
    return json_response(await plane_of(request).model_metadata(*model_of(request), None))


async def model_config(request: web.Request) -> web.Response:
    """Triton's model configuration."""
    return json_response(await plane_of(request).model_config(*model_of(request), None))


async def model_stats(request: web.Request) -> web.Response:
    """Triton's statistics of the model named (every model's at /v2/models/stats)."""
    name, version = request.match_info.get("model", ""), request.match_info.get("version", "")
    return json_response({"model_stats": plane_of(request).model_statistics(name, version)})


async def infer(request: web.Request) -> web.Response:
    """KServe v2 inference: JSON tensors, or Triton's binary tensor data."""
    name, version = model_of(request)
    body = await read_body(request)
    decoded = await offload.decoded(len(body), tensors.infer_request, body,
                                    request.headers.get(tensors.HEADER_LENGTH), name, version, json_object)
    response = await plane_of(request).infer(decoded.request, None)
    payload, binary = tensors.infer_response(response, decoded.binary_output)
    if not decoded.binary_output:
        return json_response(payload)
    header = json_response(payload).body
    return web.Response(body=header + binary, content_type="application/octet-stream",
                        headers={tensors.HEADER_LENGTH: str(len(header))})


async def repository_index(request: web.Request) -> web.Response:
    """Every model of the repository with its state (`{"ready": true}`: the ready ones only)."""
    body = await read_object(request, "repository index request", empty_ok=True)
    ready = body.get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidInput(f"ready must be a boolean, got {shown(ready)}")
    return json_response([{"name": e.name, "version": e.version, "state": e.state.value, "reason": e.reason}
                          for e in plane_of(request).index(ready_only=ready)])


async def _parameters(request: web.Request) -> dict:
    """The `parameters` object of a repository request's body."""
    body = await read_object(request, "repository request", empty_ok=True)
    given = body.get("parameters", {})
    if not isinstance(given, dict):
        raise InvalidInput(f"repository request parameters must be a JSON object, got {shown(given)}")
    return given


async def repository_load(request: web.Request) -> web.Response:
    """Load (or reload with no gap) a model; parameter `config`: JSON settings over its own."""
    await plane_of(request).load(request.match_info["model"], await _parameters(request))
    return json_response({})


async def repository_unload(request: web.Request) -> web.Response:
    """Unload a model: new requests are refused, in-flight ones complete."""
    await _parameters(request)
    await plane_of(request).unload(request.match_info["model"])
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
