"""A request's glossary on the wire: translator.v1 `glossary` (GlossaryTerm), the KServe v2 gRPC and generate
parameter of the same name; the terms a text holds become its required phrases (a text holding none decodes
as without a glossary), each answer names the terms applied and those its translation lacks, alignment is
returned for the placed terms, documents apply the glossary per sentence (and refuse required_phrases), and
hostile glossaries are refused with INVALID_ARGUMENT / 400 naming the fault."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.grpc.translator import decode_options
from service.domain.glossary import Glossary
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.http import post_json
from tests.support.kserve import text_input, triton_client
from tests.support.server import server_config

# the tiny model normalizes numbers: "the 4217 cat." -> "the forty-two cat."; "seven" is nowhere in it
HELD, OTHER, MAX_NEW = "the 4217 cat.", "we 8 big.", 20
GLOSSARY = {"cat": "seven"}
Term = pb.TranslateOptions.GlossaryTerm


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


def forms(runner: Runner, target: str) -> tuple[tuple[int, ...], ...]:
    """The token-id forms of a target term (standalone and after a space), as a required phrase's."""
    return runner.resolve(DecodeOptions(required_phrases=[target])).required_phrases.constraints[0].forms


def where(ids: list[int], options: tuple[tuple[int, ...], ...]) -> range | None:
    """The positions of the first form found in ids, or None."""
    for form in options:
        for i in range(len(ids) - len(form) + 1):
            if tuple(ids[i : i + len(form)]) == form:
                return range(i, i + len(form))
    return None


def test_translator_v1_glossary_converts() -> None:
    options = pb.TranslateOptions(glossary=[Term(source="cat", targets=["seven", "sept"]),
                                            Term(source="New York", targets=["Nueva York"])])
    glossary = decode_options(options).glossary
    assert glossary == Glossary.from_request({"cat": ["seven", "sept"], "New York": "Nueva York"})
    assert decode_options(pb.TranslateOptions()).glossary == Glossary()


def test_every_protocol_places_the_terms_a_text_holds(server: BackgroundServer, stub, runner: Runner) -> None:
    seven = forms(runner, "seven")
    (plain,) = runner.translate([HELD], DecodeOptions(max_output_tokens=MAX_NEW, beam_size=2))
    assert where(plain[0].tokens, seven) is None  # the model would not say it by itself
    options = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=2,
                                  glossary=[Term(source="cat", targets=["seven"])])
    request = pb.TranslateRequest(texts=[HELD, OTHER], options=options)
    held, other = stub.Translate(request, timeout=60).results
    assert list(held.glossary_terms) == ["cat"] and list(other.glossary_terms) == []
    (h,) = held.hypotheses
    assert where(list(h.token_ids), seven) is not None and list(h.unmet_glossary_terms) == []
    assert list(h.unmet_required_phrases) == []  # the request's own phrases only (none here)
    bare = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=2)
    (unglossed,) = stub.Translate(pb.TranslateRequest(texts=[OTHER], options=bare), timeout=60).results
    assert list(other.hypotheses[0].token_ids) == list(unglossed.hypotheses[0].token_ids)  # as without

    url = f"http://{server.http_address}/v2/models/translator/generate"
    asked = {"max_tokens": MAX_NEW, "beam_size": 2, "glossary": GLOSSARY}
    status, _, body = post_json(url, {"text_input": HELD, "parameters": asked})
    answer = json.loads(body)
    assert status == 200 and answer["text_output"] == h.text
    assert answer["glossary_terms"] == ["cat"] and answer["unmet_glossary_terms"] == []
    status, _, body = post_json(url, {"text_input": OTHER, "parameters": asked})
    assert json.loads(body)["text_output"] == unglossed.hypotheses[0].text
    with triton_client(server.address) as client:
        result = client.infer("translator", [text_input([HELD, OTHER])],
                              parameters={"max_tokens": MAX_NEW, "beam_size": 2,
                                          "glossary": '[["cat", "seven"]]'})
    params = result.get_response().parameters
    assert result.as_numpy("TRANSLATION").tolist() == [h.text.encode(), unglossed.hypotheses[0].text.encode()]
    assert json.loads(params["glossary_terms"].string_param) == [["cat"], []]
    assert json.loads(params["unmet_glossary_terms"].string_param) == [[], []]
    assert "unmet_required_phrases" not in params


def test_unmet_terms_and_own_phrases_are_told_apart(server: BackgroundServer) -> None:
    """No room for either: the request's phrase is reported by its index, the glossary's term by source."""
    url = f"http://{server.http_address}/v2/models/translator/generate"
    asked = {"max_tokens": 2, "required_phrases": ["thousand"], "glossary": {"cat": "seventy-seven"},
             "n_best": 1, "return_scores": True}
    status, _, body = post_json(url, {"text_input": HELD, "parameters": asked})
    answer = json.loads(body)
    assert status == 200, body
    assert answer["unmet_required_phrases"] == [0] and answer["unmet_glossary_terms"] == ["cat"]
    assert answer["hypotheses"][0]["unmet_glossary_terms"] == ["cat"]


def test_alignment_covers_the_placed_term(stub, runner: Runner) -> None:
    options = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=2, return_alignment=True,
                                  glossary=[Term(source="cat", targets=["seven"])])
    (result,) = stub.Translate(pb.TranslateRequest(texts=[HELD], options=options), timeout=60).results
    (h,) = result.hypotheses
    placed = where(list(h.token_ids), forms(runner, "seven"))
    assert placed is not None and len(h.alignment) >= len(h.token_ids)
    for i in placed:
        weights = list(h.alignment[i].weights)
        assert len(weights) == len(result.source_token_ids) and sum(weights) == pytest.approx(1.0, abs=1e-3)


def test_a_document_applies_the_glossary_per_sentence(server: BackgroundServer, stub, runner: Runner) -> None:
    seven = forms(runner, "seven")
    options = DecodeOptions(max_output_tokens=MAX_NEW, beam_size=2)
    first, second = (runner.translate([t], options)[0][0] for t in (OTHER, HELD))
    glossed = runner.translate([HELD], DecodeOptions(max_output_tokens=MAX_NEW, beam_size=2,
                                                     required_phrases=[["seven"]]))[0][0]
    assert where(first.tokens, seven) is None and where(second.tokens, seven) is None
    assert where(glossed.tokens, seven) is not None
    document = f"{OTHER} {HELD}"
    request = pb.TranslateDocumentRequest(
        document=document, format=pb.DOCUMENT_FORMAT_TEXT,
        options=pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=2,
                                    glossary=[Term(source="cat", targets=["seven"])]))
    answer = stub.TranslateDocument(request, timeout=60)
    assert answer.segments == 2 and answer.document == f"{first.text} {glossed.text}"
    url = f"http://{server.http_address}/v2/models/translator/generate"
    asked = {"format": "text", "max_tokens": MAX_NEW, "beam_size": 2, "glossary": GLOSSARY}
    status, _, body = post_json(url, {"text_input": document, "parameters": asked})
    assert status == 200 and json.loads(body)["text_output"] == answer.document
    asked = {"format": "text", "required_phrases": ["seven"]}
    status, _, body = post_json(url, {"text_input": document, "parameters": asked})
    assert status == 400 and "give a glossary" in json.loads(body)["error"]
    request.options.CopyFrom(pb.TranslateOptions(required_phrases=[
        pb.TranslateOptions.RequiredPhrase(texts=["seven"])]))
    with pytest.raises(grpc.RpcError) as error:
        stub.TranslateDocument(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "glossary" in error.value.details()


HOSTILE: list[tuple[Any, str]] = [  # (glossary as KServe / generate send it, what the message must name)
    ({f"w{i}": "x" for i in range(257)}, "more than 256 source terms"),
    ({"": "seven"}, "empty term"), ({"cat": "  "}, "empty term"),
    ({"c\x07t": "seven"}, "control character U+0007"), ({"cat": "se\x00ven"}, "control character U+0000"),
    ({"cat": []}, "no target term"), ({"cat": [f"t{i}" for i in range(17)]}, "more than 16 target forms"),
    ({"cat": "x" * 300}, "a term of 300 characters"), ([["cat"]], "a list of [source, target] pairs"),
    ("cat", "JSON object"), ({"cat": 7}, "a term must be a string"),
]


def test_hostile_glossaries_are_refused_naming_the_fault(server: BackgroundServer, stub) -> None:
    url = f"http://{server.http_address}/v2/models/translator/generate"
    for value, named in HOSTILE:
        status, _, body = post_json(url, {"text_input": HELD, "parameters": {"glossary": value}})
        assert status == 400 and named in json.loads(body)["error"], (value, body)
        with triton_client(server.address) as client, pytest.raises(Exception) as info:
            client.infer("translator", [text_input([HELD])], parameters={"glossary": json.dumps(value)})
        assert "INVALID_ARGUMENT" in str(info.value.status()) and named in info.value.message(), value
    for terms, named in (([Term(source="cat")], "no target term"),
                         ([Term(source="c\x1bt", targets=["seven"])], "U+001B"),
                         ([Term(source=f"w{i}", targets=["x"]) for i in range(257)], "256")):
        with pytest.raises(grpc.RpcError) as error:
            stub.Translate(pb.TranslateRequest(texts=[HELD], options=pb.TranslateOptions(glossary=terms)),
                           timeout=60)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and named in error.value.details()
    status, _, body = post_json(url, {"text_input": HELD, "parameters": {"glossary": GLOSSARY,
                                                                          "temperature": 0.5}})
    assert status == 400 and "placed by beam search" in json.loads(body)["error"]
