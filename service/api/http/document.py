"""Whole documents over HTTP: `POST /v2/models/{m}[/versions/{v}]/document`.

The body is the document in UTF-8, its Content-Type its format: `text/plain`, `text/html` or `text/markdown`
(`?format=text|html|markdown` overrides it). Decoding options are query parameters by their names in
docs/api.md, each value read as JSON where it parses as JSON (`?beam_size=4&target_language=de`), else as a
string; `protect` (repeatable) is a regular expression of text the model must not see. The answer is the
translated document in the same media type, with headers naming the model (`X-Model-Name`,
`X-Model-Version`), the sentences sent (`X-Document-Segments`) and those cut at the model's source limit
(`X-Document-Split`: their indexes, comma-separated; absent when none was).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from service.api.http.body import read_body
from service.api.http.context import model_of, plane_of
from service.dataplane import parameters
from service.dataplane.documents import FORMAT, PROTECT, document_parameters
from service.domain.errors import InvalidInput
from service.domain.text import shown

MEDIA_TYPES = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown"}


def _value(raw: str) -> Any:
    """A query value as JSON where it parses (numbers, true/false), else the string itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def document_format(request: web.Request) -> str:
    """The document's format: `?format=`, else its Content-Type's; InvalidInput for another media type."""
    if FORMAT in request.query:
        return request.query[FORMAT]
    fmt = MEDIA_TYPES.get(request.content_type)
    if fmt is None:
        raise InvalidInput(f"a document's Content-Type is one of {', '.join(MEDIA_TYPES)} (or give "
                           f"?format=), got {shown(request.content_type)}")
    return fmt


async def document(request: web.Request) -> web.Response:
    """Translate one document; the answer in its media type."""
    fmt = document_format(request)
    raw = await read_body(request)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the document is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    given = {k: _value(v) for k, v in request.query.items() if k not in (FORMAT, PROTECT)}
    _, protect, rest = document_parameters(given | {FORMAT: fmt, PROTECT: request.query.getall(PROTECT, [])})
    asked = parameters.read(rest)
    answer = await plane_of(request).document(*model_of(request), text, fmt, asked.decoding, protect,
                                              asked.deadline)
    media = next(m for m, f in MEDIA_TYPES.items() if f == fmt)
    headers = {"X-Model-Name": answer.model_name, "X-Model-Version": answer.model_version,
               "X-Document-Segments": str(answer.segments)}
    if answer.split:
        headers["X-Document-Split"] = ",".join(map(str, answer.split))
    return web.Response(text=answer.text, content_type=media, charset="utf-8", headers=headers)


def add_routes(app: web.Application) -> None:
    """Register document, with and without a version."""
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/document", document)
