"""Required phrases on the wire: translator.v1 `required_phrases`, the KServe v2 gRPC and generate parameter
of the same name; the unmet ones answered per hypothesis (translator.v1), in `unmet_required_phrases`
(generate) and as KServe's response parameter; hostile values (too many, empty, control characters, ids out
of range, wrong kinds) refused with INVALID_ARGUMENT / 400 naming what was wrong."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.grpc.translator import decode_options
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.http import parse_sse, post_json
from tests.support.kserve import text_input, triton_client
from tests.support.server import TEXTS, server_config

TEXT, MAX_NEW = TEXTS[1], 20
Phrase = pb.TranslateOptions.RequiredPhrase


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def test_translator_v1_phrases_convert() -> None:
    options = pb.TranslateOptions(required_phrases=[
        Phrase(texts=["seven"]),
        Phrase(texts=["dollar", "dollars"], ids=[pb.TranslateOptions.TokenIds(ids=[5])])])
    assert decode_options(options).required_phrases == (["seven"], ["dollar", "dollars", [5]])
    assert decode_options(pb.TranslateOptions()) == DecodeOptions()


def holds(ids: list[int], form: tuple[int, ...]) -> bool:
    return any(tuple(ids[i : i + len(form)]) == form for i in range(len(ids) - len(form) + 1))


def test_every_protocol_places_and_reports(server: BackgroundServer, channel: grpc.Channel,
                                           runner: Runner) -> None:
    forms = runner.resolve(DecodeOptions(required_phrases=["seven"])).required_phrases.constraints[0].forms
    stub = pb_grpc.TranslatorStub(channel)
    options = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=2,
                                  required_phrases=[Phrase(texts=["seven"])])
    (result,) = stub.Translate(pb.TranslateRequest(texts=[TEXT], options=options), timeout=60).results
    (h,) = result.hypotheses
    assert any(holds(list(h.token_ids), f) for f in forms) and list(h.unmet_required_phrases) == []
    tight = pb.TranslateOptions(max_output_tokens=4, required_phrases=[Phrase(texts=["thousand"]),
                                                                         Phrase(texts=["seven"])])
    (result,) = stub.Translate(pb.TranslateRequest(texts=[TEXT], options=tight), timeout=60).results
    (h,) = result.hypotheses
    unmet = list(h.unmet_required_phrases)  # "thousand" cannot fit in 4 tokens; each protocol says the same
    assert 0 in unmet
    url = f"http://{server.http_address}/v2/models/translator/generate"
    asked = {"max_tokens": 4, "required_phrases": ["thousand", "seven"]}
    status, _, body = post_json(url, {"text_input": TEXT, "parameters": asked})
    assert status == 200 and json.loads(body)["unmet_required_phrases"] == unmet
    with triton_client(server.address) as client:
        result = client.infer("translator", [text_input([TEXT, TEXT])],
                              parameters={"max_tokens": 4, "required_phrases": '["thousand", ["seven"]]'})
    answered = result.get_response().parameters["unmet_required_phrases"].string_param
    assert json.loads(answered) == [unmet, unmet]


def test_streaming_calls_answer_the_whole_result_with_its_unmet_phrases(
        server: BackgroundServer, channel: grpc.Channel) -> None:
    """Required phrases on every streaming call: no pieces (the phrases are placed by beam search, known at
    the end), one final answer that names the unmet phrases as the call's non-streaming form does."""
    asked = {"max_tokens": 4, "required_phrases": '["thousand", ["seven"]]'}
    with triton_client(server.address) as client:
        want = client.infer("translator", [text_input([TEXT])], parameters=asked)
        unmet = want.get_response().parameters["unmet_required_phrases"].string_param
        assert 0 in json.loads(unmet)[0]  # "thousand" cannot fit in 4 tokens
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for i, stream in enumerate((False, True)):
            client.async_stream_infer("translator", [text_input([TEXT])], request_id=f"r{i}",
                                      parameters=asked | {"stream": stream})
            result, error = answers.get(timeout=60)
            assert error is None, error
            got = result.get_response().parameters
            assert got["triton_final_response"].bool_param
            assert got["unmet_required_phrases"].string_param == unmet
            assert result.as_numpy("TRANSLATION").tolist() == want.as_numpy("TRANSLATION").tolist()
    tight = pb.TranslateOptions(max_output_tokens=4, required_phrases=[Phrase(texts=["thousand"]),
                                                                         Phrase(texts=["seven"])])
    (message,) = pb_grpc.TranslatorStub(channel).TranslateStream(
        pb.TranslateStreamRequest(text=TEXT, options=tight), timeout=60)
    (h,) = message.result.hypotheses
    assert list(h.unmet_required_phrases) == json.loads(unmet)[0]
    url = f"http://{server.http_address}/v2/models/translator/generate_stream"
    status, _, body = post_json(url, {"text_input": TEXT, "parameters": {"max_tokens": 4, "required_phrases":
                                                                         ["thousand", "seven"]}})
    (event,) = parse_sse(body)
    assert status == 200 and event["unmet_required_phrases"] == json.loads(unmet)[0]


def hostile(vocab: int) -> list[tuple[Any, str]]:
    """(required_phrases as KServe / generate send them, what the message must name)."""
    return [(["x"] * 33, "at most 32"), ([""], "required_phrases[0] is empty"), ([[]], "required_phrases[0]"),
            (["ok", "a\x07b"], "required_phrases[1] holds the control character"),
            ([[1, vocab + 5]], f"[0, {vocab})"), ([["a", 3]], "required_phrases[0] must be"),
            ("seven", "JSON array"), ([[f"w{i}" for i in range(20)]], "at most 16")]


def test_hostile_phrases_are_refused_naming_the_fault(server: BackgroundServer, channel: grpc.Channel,
                                                      runner: Runner) -> None:
    url = f"http://{server.http_address}/v2/models/translator/generate"
    stub = pb_grpc.TranslatorStub(channel)
    for value, named in hostile(runner.vocab_size):
        status, _, body = post_json(url, {"text_input": TEXT, "parameters": {"required_phrases": value}})
        assert status == 400 and named in json.loads(body)["error"], (value, body)
        with triton_client(server.address) as client, pytest.raises(Exception) as info:
            client.infer("translator", [text_input([TEXT])],
                         parameters={"required_phrases": json.dumps(value)})
        assert "INVALID_ARGUMENT" in str(info.value.status()) and named in info.value.message(), value
    bad = pb.TranslateOptions(required_phrases=[Phrase(texts=["a\x00"])])
    with pytest.raises(grpc.RpcError) as error:
        stub.Translate(pb.TranslateRequest(texts=[TEXT], options=bad), timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "U+0000" in error.value.details()
    for options, named in ((dict(required_phrases=["seven"], temperature=0.5), "sampling"),
                           (dict(required_phrases=["seven"], suppress_sequences=["seven"]), "suppress"),
                           (dict(required_phrases=[[runner.special.eos]]), "end-of-sequence")):
        status, _, body = post_json(url, {"text_input": TEXT, "parameters": options})
        assert status == 400 and named in json.loads(body)["error"], (options, body)
