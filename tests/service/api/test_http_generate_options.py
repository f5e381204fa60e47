"""generate's translator.v1 options over HTTP: n_best, return_alternatives, return_scores,
return_alignment and return_tokens answer the hypotheses, scores, alignment rows and tokens that
translator.v1 Translate (gRPC) answers for the same request and the reference decoder gives; bad
values are 400 naming the parameter; generate_stream refuses them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import reference
from tests.support.http import post_json
from tests.support.server import TEXTS, server_config

MAX_NEW = 12


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


def generate(server: BackgroundServer, payload: dict, endpoint: str = "generate") -> tuple[int, dict]:
    """POST generate: (status, JSON answer)."""
    status, kind, body = post_json(f"http://{server.http_address}/v2/models/translator/{endpoint}", payload)
    assert kind == "application/json", body
    return status, json.loads(body)


def translate(server: BackgroundServer, text: str, options: pb.TranslateOptions) -> pb.TranslationResult:
    """translator.v1 Translate of one text over gRPC."""
    with grpc.insecure_channel(server.address) as channel:
        return pb_grpc.TranslatorStub(channel).Translate(
            pb.TranslateRequest(texts=[text], options=options), timeout=60).results[0]


def test_n_best_scores_alignment_and_tokens_are_translate_s(http_server, runner):
    """Every hypothesis, best first, with the fields translator.v1 fills for the same options, and the
    reference decoder's tokens, scores and alignment rows."""
    beam = min(4, runner.max_beam)
    n_best = min(3, beam)
    flags = {"return_scores": True, "return_alignment": True, "return_tokens": True}
    for text in TEXTS:
        status, answer = generate(http_server, {"text_input": text, "parameters": {
            "beam_size": beam, "n_best": n_best, "max_tokens": MAX_NEW} | flags})
        assert status == 200, answer
        grpc_result = translate(http_server, text, pb.TranslateOptions(
            beam_size=beam, n_best=n_best, max_output_tokens=MAX_NEW, **flags))
        want = reference(runner, text, DecodeOptions(beam_size=beam, n_best=n_best, max_output_tokens=MAX_NEW,
                                                     return_alignment=True))
        hypotheses = answer["hypotheses"]
        assert len(hypotheses) == len(grpc_result.hypotheses) == len(want) == n_best
        assert answer["text_output"] == want[0].text
        assert answer["text_outputs"] == [h.text for h in want] == [h.text for h in grpc_result.hypotheses]
        assert answer["source_token_ids"] == list(grpc_result.source_token_ids)
        assert answer["source_tokens"] == list(grpc_result.source_tokens)
        for got, wire, ref in zip(hypotheses, grpc_result.hypotheses, want, strict=True):
            assert got["token_ids"] == ref.tokens == list(wire.token_ids)
            assert got["tokens"] == list(wire.tokens) == [runner.tokenizer.token(i) for i in ref.tokens]
            assert got["finish_reason"] == str(ref.finish_reason)
            assert got["score"] == pytest.approx(ref.score, rel=1e-5, abs=1e-5) == wire.score
            assert got["log_prob"] == pytest.approx(ref.log_prob, rel=1e-5, abs=1e-5) == wire.log_prob
            assert len(got["alignment"]) == len(ref.tokens)  # one row per token (none for an empty output)
            assert all(len(row) == len(answer["source_token_ids"]) for row in got["alignment"])
            rows = np.array(got["alignment"], np.float64)
            np.testing.assert_allclose(rows, np.array(ref.alignment, np.float64), atol=1e-5)
            np.testing.assert_allclose(rows, np.array([list(r.weights) for r in wire.alignment], np.float64),
                                       atol=1e-6)


def test_flags_alone_add_only_what_they_ask(http_server, runner):
    """return_scores alone: one hypothesis with its score and log-prob, no alignment, tokens or
    text_outputs; a plain generate has none of these keys."""
    text = TEXTS[1]
    status, answer = generate(http_server, {"text_input": text, "return_scores": True, "max_tokens": MAX_NEW})
    assert status == 200, answer
    ref = reference(runner, text, DecodeOptions(max_output_tokens=MAX_NEW))[0]
    assert set(answer) == {"model_name", "model_version", "text_output", "hypotheses"}
    (hyp,) = answer["hypotheses"]
    assert set(hyp) == {"text", "token_ids", "finish_reason", "score", "log_prob"}
    assert hyp["token_ids"] == ref.tokens and hyp["log_prob"] == pytest.approx(ref.log_prob, abs=1e-5)
    status, plain = generate(http_server, {"text_input": text, "max_tokens": MAX_NEW})
    assert status == 200 and set(plain) == {"model_name", "model_version", "text_output"}


def test_alternatives_after_a_prefix_are_translate_s(http_server, runner):
    """return_alternatives with a target prefix: the alternatives translator.v1 answers, in its order."""
    text = TEXTS[0]
    prefix = reference(runner, text, DecodeOptions(max_output_tokens=MAX_NEW))[0].text.split(" ")[0]
    n_best = min(3, runner.max_beam)
    status, answer = generate(http_server, {"text_input": text, "parameters": {
        "target_prefix": prefix, "return_alternatives": True, "n_best": n_best, "max_tokens": MAX_NEW}})
    assert status == 200, answer
    wire = translate(http_server, text, pb.TranslateOptions(
        target_prefix=prefix, return_alternatives=True, n_best=n_best, max_output_tokens=MAX_NEW))
    assert answer["text_outputs"] == [h.text for h in wire.hypotheses] and len(wire.hypotheses) == n_best
    assert [h["token_ids"] for h in answer["hypotheses"]] == [list(h.token_ids) for h in wire.hypotheses]


@pytest.mark.parametrize(("parameters", "phrase"), [
    ({"n_best": "three"}, "parameter n_best must be a whole number"),
    ({"n_best": 0}, "parameter n_best must be >= 1"),
    ({"n_best": True}, "n_best must be an integer"),
    ({"beam_size": 2, "n_best": 3}, "n_best must be between"),
    ({"return_scores": "yes"}, "parameter return_scores must be a boolean"),
    ({"return_alignment": 1}, "parameter return_alignment must be a boolean"),
])
def test_bad_values_are_400_naming_the_parameter(http_server, parameters, phrase):
    status, answer = generate(http_server, {"text_input": TEXTS[0], "parameters": parameters})
    assert status == 400 and phrase in answer["error"], answer


@pytest.mark.parametrize("key", ["n_best", "return_scores", "return_alignment", "return_tokens",
                                 "return_alternatives"])
def test_generate_stream_refuses_them(http_server, key):
    status, answer = generate(http_server, {"text_input": TEXTS[0], key: 2 if key == "n_best" else True},
                              endpoint="generate_stream")
    assert status == 400 and key in answer["error"] and "generate_stream" in answer["error"], answer
