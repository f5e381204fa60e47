"""Language detection over HTTP (/v2/detect, /v2/models/{m}/detect) and translator.v1 Detect: the same answer
as the detector's own guesses, bad texts 400 / INVALID_ARGUMENT naming what is wrong, and source_language
"auto" accepted and ignored by a model that takes no source language (the shipped default model: one language
pair; its bundle is committed, so no training is needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.config import DEFAULT_BUNDLE
from service.runtime import detector
from service.server import BackgroundServer
from tests.support.http import post_json
from tests.support.server import server_config

FRENCH = "Tous les êtres humains naissent libres et égaux en dignité et en droits."


@pytest.fixture(scope="module")
def both() -> Iterator[BackgroundServer]:
    """A server of the default bundle with both ports open."""
    with BackgroundServer(server_config(Path(DEFAULT_BUNDLE), http_port=0)) as srv:
        yield srv


def test_http_detect_answers_the_detectors_guesses(both: BackgroundServer) -> None:
    want = detector.guesses(FRENCH, 4)
    for path in ("/v2/detect", "/v2/models/translator/detect"):
        status, _, body = post_json(f"http://{both.http_address}{path}", {"text": FRENCH})
        answer = json.loads(body)
        assert status == 200 and answer["language"] == want[0].language == "fr"
        assert answer["confidence"] == pytest.approx(want[0].confidence)
        assert [a["language"] for a in answer["alternatives"]] == [g.language for g in want[1:]]
        assert answer["model_language"] is None  # no model, or one that takes no language
    assert answer["model_name"] == "translator"


@pytest.mark.parametrize(("body", "says"), [
    ({"text": ""}, "empty"), ({"text": "a\u0007b"}, "control character (U+0007)"), ({}, "needs 'text'"),
    ({"text": "x", "lang": 1}, "unknown detect request field 'lang'"), ({"text": 5}, "must be a string"),
])
def test_http_detect_refuses_bad_texts(both: BackgroundServer, body: dict, says: str) -> None:
    status, _, answer = post_json(f"http://{both.http_address}/v2/detect", body)
    assert status == 400 and says in json.loads(answer)["error"]


def test_grpc_detect_and_auto_on_a_one_pair_model(both: BackgroundServer) -> None:
    with grpc.insecure_channel(both.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        reply = stub.Detect(pb.DetectRequest(text=FRENCH, model="translator"), timeout=30)
        assert reply.detected.best.language == "fr" and reply.detected.model_language == ""
        assert reply.model == "translator" and len(reply.detected.alternatives) == 3
        with pytest.raises(grpc.RpcError) as refused:
            stub.Detect(pb.DetectRequest(text=" "), timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        plain = stub.Translate(pb.TranslateRequest(texts=["It costs 5 dollars."]), timeout=30)
        options = pb.TranslateOptions(source_language="auto")
        auto = stub.Translate(pb.TranslateRequest(texts=["It costs 5 dollars."], options=options), timeout=30)
        assert auto.results[0].hypotheses[0].text == plain.results[0].hypotheses[0].text
        assert not auto.results[0].HasField("detected_language")
