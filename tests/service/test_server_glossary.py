"""A model's glossary in a repository (glossary.tsv beside model.json): applied to the texts holding its
terms, under a request's own glossary, counted in GetModelInfo and the Triton model config; a bad file
refuses the model's load with the line at fault."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.kserve import triton_client
from tests.support.repository import link_repository
from tests.support.server import server_config

HELD, OTHER = "the 4217 cat.", "we 8 big."  # the tiny model says neither "seven" nor "eight" for them
GLOSSARY = "# the model's terms\ncat\tseven\nNew York\tNueva York\n"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_bundle: Path) -> Path:
    """DIR/g/1 (its glossary.tsv holds two terms) and DIR/bad/1 (its glossary.tsv a line without a tab)."""
    root = link_repository(tmp_path_factory.mktemp("repository"), tiny_bundle, (("g", 1), ("bad", 1)))
    (root / "g" / "glossary.tsv").write_text(GLOSSARY, encoding="utf-8")
    (root / "bad" / "glossary.tsv").write_text("cat\tseven\nbig eight\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(repository: Path, tiny_bundle: Path) -> Iterator[BackgroundServer]:
    """Control mode explicit, model `g` loaded at start."""
    config = server_config(tiny_bundle, model_repository=repository, model_control_mode="explicit",
                           load_model=("g",))
    with BackgroundServer(config) as srv:
        yield srv


def holds(runner: Runner, ids: list[int], word: str) -> bool:
    """Whether ids hold a form of `word` (standalone or after a space)."""
    forms = runner.resolve(DecodeOptions(required_phrases=[word])).required_phrases.constraints[0].forms
    return any(tuple(ids[i : i + len(f)]) == f for f in forms for i in range(len(ids) - len(f) + 1))


def test_the_model_glossary_applies_is_reported_and_yields_to_the_request(server: BackgroundServer,
                                                                           runner: Runner) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(model="g"), timeout=60)
        assert info.glossary_terms == 2
        options = pb.TranslateOptions(max_output_tokens=20, beam_size=2)
        held, other = stub.Translate(pb.TranslateRequest(model="g", texts=[HELD, OTHER], options=options),
                                     timeout=60).results
        assert list(held.glossary_terms) == ["cat"]
        assert holds(runner, list(held.hypotheses[0].token_ids), "seven")
        (plain,) = runner.translate([OTHER], DecodeOptions(max_output_tokens=20, beam_size=2))
        assert list(other.glossary_terms) == [] and list(other.hypotheses[0].token_ids) == plain[0].tokens
        options.glossary.add(source="CAT", targets=["eight"])
        request = pb.TranslateRequest(model="g", texts=[HELD], options=options)
        (own,) = stub.Translate(request, timeout=60).results
        assert list(own.glossary_terms) == ["CAT"]
        assert holds(runner, list(own.hypotheses[0].token_ids), "eight")
    with triton_client(server.address) as client:
        config = client.get_model_config("g").config
        assert config.parameters["glossary_terms"].string_value == "2"


def test_a_bad_glossary_file_refuses_the_load_naming_its_line(server: BackgroundServer) -> None:
    with triton_client(server.address) as client:
        with pytest.raises(triton.InferenceServerException) as error:
            client.load_model("bad")
        assert "bad/glossary.tsv, line 2: 0 tabs" in error.value.message()
        (entry,) = [m for m in client.get_model_repository_index().models if m.name == "bad"]
        assert entry.state != "READY", entry


def test_a_stream_of_a_text_holding_a_model_term_is_answered_whole(server: BackgroundServer,
                                                                   runner: Runner) -> None:
    """Greedy streams its pieces, but a text holding a term is placed by beam search: the result alone."""
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        options = pb.TranslateOptions(max_output_tokens=20, beam_size=1)
        held = list(stub.TranslateStream(pb.TranslateStreamRequest(model="g", text=HELD, options=options),
                                         timeout=60))
        other = list(stub.TranslateStream(pb.TranslateStreamRequest(model="g", text=OTHER, options=options),
                                          timeout=60))
    assert [m.WhichOneof("event") for m in held] == ["result"]
    assert list(held[0].result.glossary_terms) == ["cat"]
    assert holds(runner, list(held[0].result.hypotheses[0].token_ids), "seven")
    assert len(other) > 1 and other[-1].WhichOneof("event") == "result"  # pieces, then the result
