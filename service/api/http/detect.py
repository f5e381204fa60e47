"""Language detection over HTTP: `POST /v2/detect` (the detector's code alone) and
`POST /v2/models/{m}[/versions/{v}]/detect` (with that model's code of the language), a JSON endpoint
beside generate and score.

Body: `{"text": "..."}`. Answer: `{"model_name", "model_version", "language", "confidence", "model_language",
"alternatives": [{"language", "confidence"}, ...]}` (translator.v1 Detect's fields; model_language null when
no model is named or the model does not take the language; docs/api.md).
"""

from __future__ import annotations

from aiohttp import web

from service.api.http.body import read_object
from service.api.http.context import model_of, plane_of
from service.api.http.errors import json_response
from service.dataplane.rendering import detected_fields
from service.domain.errors import InvalidInput

TEXT_KEY = "text"


async def detect(request: web.Request) -> web.Response:
    """The language of one text; one JSON answer."""
    body = await read_object(request, "detect request")
    unknown = sorted(set(body) - {TEXT_KEY})
    if unknown:
        raise InvalidInput(f"unknown detect request field {unknown[0]!r}: the body is "
                           f"{{\"{TEXT_KEY}\": ...}}")
    if TEXT_KEY not in body:
        raise InvalidInput(f"a detect request needs {TEXT_KEY!r}, the text whose language is wanted")
    name, version = model_of(request) if "model" in request.match_info else ("", "")
    model, number, found = await plane_of(request).detect(body[TEXT_KEY], name, version)
    return json_response({"model_name": model, "model_version": number, **detected_fields(found)})


def add_routes(app: web.Application) -> None:
    """Register detect: without a model, and with one (with and without a version)."""
    for prefix in ("/v2", "/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/detect", detect)
