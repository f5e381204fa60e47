"""Score over HTTP: `POST /v2/models/{m}[/versions/{v}]/score`, a JSON endpoint beside generate.

Body: `{"source": "...", "target": "..."}` for one pair, or `{"sources": [...], "targets": [...]}`, and
optionally `"parameters": {"return_alignment": bool, "return_tokens": bool, "source_language": "en",
"target_language": "de", "timeout": µs}` (or these as other properties of the body). Answer: `{"model_name",
"model_version", "results": [{"token_ids", "log_probs", "log_prob", "score", "end_token_scored"}, ...]}` in
pair order, each result with `"alignment"` (rows over `"source_token_ids"`) and `"tokens"` / `"source_tokens"`
when asked: the translator.v1 Score RPC's fields (docs/api.md).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.api.http.body import read_object
from service.api.http.context import model_of, plane_of
from service.api.http.errors import json_response
from service.dataplane import parameters
from service.dataplane.parameters import score_options
from service.dataplane.rendering import Want
from service.domain.errors import InvalidInput
from service.domain.text import shown

PAIRS = ("source", "sources", "target", "targets")


def _texts(body: dict[str, Any], one: str, many: str) -> list[str]:
    """The texts of `many` (a list of strings), or of `one` (a string)."""
    if (one in body) == (many in body):
        raise InvalidInput(f"give either {one} (a string) or {many} (a list of strings)")
    value = body[one] if one in body else body[many]
    texts = [value] if one in body and isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise InvalidInput(f"{one if one in body else many} must be "
                           f"{'a string' if one in body else 'a list of strings'}, got {shown(value)}")
    return texts


async def score(request: web.Request) -> web.Response:
    """Score the pairs of one request; one JSON answer."""
    body = await read_object(request, "score request")
    sources, targets = _texts(body, "source", "sources"), _texts(body, "target", "targets")
    given = body.get("parameters", {})
    if not isinstance(given, dict):
        raise InvalidInput(f"parameters must be a JSON object, got {shown(given)}")
    merged = {k: v for k, v in body.items() if k not in (*PAIRS, "parameters")} | given
    options = score_options(merged, "scoring", parameters.SCORING)
    tokens = "return_tokens" in merged and parameters.flag("return_tokens", merged["return_tokens"])
    deadline = parameters.deadline_of(merged[parameters.TIMEOUT]) if parameters.TIMEOUT in merged else None
    answer = await plane_of(request).score(*model_of(request), sources, targets, options,
                                           Want(tokens=tokens, alignment=options.return_alignment), deadline)
    results = [{k: v for k, v in vars(s).items() if v is not None and k != "timings"} for s in answer.results]
    return json_response({"model_name": answer.model_name, "model_version": answer.model_version,
                          "results": results})


def add_routes(app: web.Application) -> None:
    """Register score, with and without a version."""
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/score", score)
