"""Score over HTTP: `POST /v2/models/{m}[/versions/{v}]/score`, a JSON endpoint beside generate.

Body: `{"source": "...", "target": "..."}` for one pair, or `{"sources": [...], "targets": [...]}`, and
optionally `"parameters": {"return_alignment": bool, "return_tokens": bool, "source_language": "en",
"target_language": "de", "timeout": µs}` (or these as other properties of the body). Answer:
`{"model_name", "model_version", "results": [{"token_ids", "log_probs", "log_prob", "score",
"end_token_scored"}, ...]}` in pair order (`end_token_scored`: whether eos was appended and scored, false
for a target as long as a translation cut at the maximum length), each result with `"alignment"` (rows
over `"source_token_ids"`) and `"tokens"` / `"source_tokens"` when asked: the translator.v1 Score RPC's
fields (docs/api.md), through the same scheduler. Bad input is 400 with a message saying what is wrong
(service/api/status.py), an unknown model 404.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from service.api.http.body import json_object, read_body
from service.api.http.errors import json_response
from service.api.http.kserve_rest import SERVICER_KEY
from service.api.kserve_codec import shown
from service.api.score import check_pair_count
from service.domain.errors import InvalidInput
from service.domain.types import ScoreOptions, ScoreResult
from service.runtime.runner import Runner

FLAGS = ("return_alignment", "return_tokens")
LANGUAGES = ("source_language", "target_language")
TIMEOUT_KEY = "timeout"


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


def score_parameters(body: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """The request's parameters (flags, languages) and its deadline; InvalidInput for a bad one."""
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidInput(f"parameters must be a JSON object, got {shown(parameters)}")
    merged = {k: v for k, v in body.items() if k in (*FLAGS, *LANGUAGES, TIMEOUT_KEY)} | parameters
    for k in FLAGS:
        if not isinstance(merged.get(k, False), bool):
            raise InvalidInput(f"parameter {k} must be true or false, got {shown(merged[k])}")
    for k in LANGUAGES:
        if merged.get(k) is not None and not isinstance(merged[k], str):
            raise InvalidInput(f"parameter {k} must be a language code (a string), got {shown(merged[k])}")
    deadline = None
    if TIMEOUT_KEY in merged:
        micros = merged[TIMEOUT_KEY]
        if not isinstance(micros, int) or isinstance(micros, bool) or micros < 1:
            raise InvalidInput(f"parameter {TIMEOUT_KEY} must be a positive number of microseconds")
        deadline = time.monotonic() + micros / 1e6
    return merged, deadline


def result_object(r: ScoreResult, parameters: dict[str, Any], runner: Runner) -> dict[str, Any]:
    """One pair's JSON result."""
    out: dict[str, Any] = {"token_ids": r.target_ids, "log_probs": r.log_probs, "log_prob": r.log_prob,
                           "score": r.score, "end_token_scored": r.end_token_scored}
    if parameters.get("return_tokens"):
        out["tokens"] = [runner.tokenizer.token(i) for i in r.target_ids]
        out["source_tokens"] = [runner.tokenizer.token(i) for i in r.source_ids]
    if parameters.get("return_tokens") or parameters.get("return_alignment"):
        out["source_token_ids"] = r.source_ids
    if parameters.get("return_alignment") and r.alignment is not None:
        out["alignment"] = r.alignment
    return out


async def score(request: web.Request) -> web.Response:
    """Score the pairs of one request; one JSON answer."""
    body = json_object(await read_body(request), "score request")
    sources, targets = _texts(body, "source", "sources"), _texts(body, "target", "targets")
    parameters, deadline = score_parameters(body)
    options = ScoreOptions(with_alignment=bool(parameters.get("return_alignment")),
                           source_language=parameters.get("source_language") or None,
                           target_language=parameters.get("target_language") or None)
    models = request.app[SERVICER_KEY].models
    name, version = request.match_info["model"], request.match_info.get("version", "")
    async with models.use(name, version, deadline) as model:
        check_pair_count(len(sources), len(targets), model.scheduler.settings.max_batch_size)
        results = await model.scheduler.score(sources, targets, options, deadline)
        return json_response({"model_name": model.name, "model_version": model.version,
                              "results": [result_object(r, parameters, model.runner) for r in results]})


def add_routes(app: web.Application) -> None:
    """Register score, with and without a version."""
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        app.router.add_route("POST", prefix + "/score", score)
