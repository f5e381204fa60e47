"""Language selection through the real server (127.0.0.1, port 0), in every batching mode: a many-to-many
(M2M100-like, format 2) bundle served with source_language / target_language on translator.v1, KServe
v2 parameters and the client, and the INVALID_ARGUMENT refusals of both APIs, also from a model of one
language pair."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service import client
from service.dataplane.kserve import deserialize_bytes, serialize_bytes
from service.domain.types import DecodeOptions
from service.server import BackgroundServer
from tests.support.decoding import reference
from tests.support.pretrained import M2M_CODES
from tests.support.server import server_config

TEXTS = ["the cat saw 12 apples.", "Der Hund sah 4217 rote Äpfel!", "we 5"]
MAX_NEW = 10
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@dataclass
class Servers:
    """A many-to-many server and a one-pair server of one batching mode, with their stubs."""

    m2m: BackgroundServer
    native: pb_grpc.TranslatorStub
    kserve: v2_grpc.GRPCInferenceServiceStub
    plain_native: pb_grpc.TranslatorStub
    plain_kserve: v2_grpc.GRPCInferenceServiceStub


@pytest.fixture(scope="module", params=["none", "dynamic", "continuous"])
def servers(request, m2m_bundles, m2m_runner, tiny_bundle, runner) -> Iterator[Servers]:
    """Both servers in one batching mode."""
    mode = request.param
    with BackgroundServer(server_config(m2m_bundles["inplace"], batching=mode), m2m_runner) as m2m, \
            BackgroundServer(server_config(tiny_bundle, batching=mode), runner) as plain, \
            grpc.insecure_channel(m2m.address) as ch, grpc.insecure_channel(plain.address) as plain_ch:
        yield Servers(m2m, pb_grpc.TranslatorStub(ch), v2_grpc.GRPCInferenceServiceStub(ch),
                      pb_grpc.TranslatorStub(plain_ch), v2_grpc.GRPCInferenceServiceStub(plain_ch))


def translate(stub: pb_grpc.TranslatorStub, texts: list[str], **options) -> pb.TranslateResponse:
    """A Translate call with these options."""
    request = pb.TranslateRequest(texts=texts, options=pb.TranslateOptions(**options))
    return stub.Translate(request, timeout=60)


def infer_request(texts: list[str], **parameters: str) -> v2.ModelInferRequest:
    """A ModelInfer request of these texts with string parameters."""
    request = v2.ModelInferRequest(model_name="translator")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    request.raw_input_contents.append(serialize_bytes(t.encode() for t in texts))
    for key, value in parameters.items():
        request.parameters[key].string_param = value
    return request


def refused(call, *args, **kwargs) -> str:
    """The details of the INVALID_ARGUMENT a call fails with."""
    with pytest.raises(grpc.RpcError) as err:
        call(*args, **kwargs)
    assert err.value.code() == INVALID, err.value.details()
    return err.value.details()


def test_translate_with_languages_is_the_runners(servers, m2m_runner):
    codes = m2m_runner.languages.codes
    got = translate(servers.native, TEXTS, source_language="de", target_language="ja",
                    max_output_tokens=MAX_NEW, beam_size=2, n_best=2, return_scores=True)
    opts = DecodeOptions(source_language="de", target_language="ja", max_output_tokens=MAX_NEW, beam_size=2,
                         n_best=2)
    for result, text in zip(got.results, TEXTS, strict=True):
        want = reference(m2m_runner, text, opts)
        assert [list(h.token_ids) for h in result.hypotheses] == [h.tokens for h in want]
        assert [h.text for h in result.hypotheses] == [h.text for h in want]
        assert all(h.token_ids[0] == codes["ja"] for h in result.hypotheses)
    info = servers.native.GetModelInfo(pb.GetModelInfoRequest(), timeout=30)
    assert list(info.languages) == sorted(M2M_CODES)
    assert list(servers.plain_native.GetModelInfo(pb.GetModelInfoRequest(), timeout=30).languages) == []


def test_a_stream_starts_with_the_language_token(servers, m2m_runner):
    request = pb.TranslateStreamRequest(text=TEXTS[1], options=pb.TranslateOptions(
        source_language="de", target_language="en", max_output_tokens=MAX_NEW))
    messages = list(servers.native.TranslateStream(request, timeout=60))
    pieces, final = [m.piece for m in messages[:-1]], messages[-1].result.hypotheses[0]
    assert pieces[0].token_id == m2m_runner.languages.codes["en"] and pieces[0].text == ""
    assert "".join(p.text for p in pieces) == final.text
    assert [p.token_id for p in pieces] == list(final.token_ids)


@pytest.mark.parametrize(("options", "message"), [
    ({"source_language": "de"},
     "set target_language, the language to translate into (e.g. cs, de, en, ha, is)"),
    ({"target_language": "de"}, "set source_language, the language of the texts (e.g. cs, de, en, ha, is)"),
    ({"source_language": "de", "target_language": "fr"}, "unknown target_language 'fr'; this model knows 8 "
                                                         "languages, e.g. cs, de, en, ha, is"),
    ({"source_language": "english", "target_language": "de"}, "unknown source_language 'english'"),
])
def test_native_language_errors(servers, options, message):
    assert message in refused(translate, servers.native, TEXTS[:1], **options)
    stream = pb.TranslateStreamRequest(text=TEXTS[0], options=pb.TranslateOptions(**options))
    assert message in refused(lambda: list(servers.native.TranslateStream(stream, timeout=30)))


def test_kserve_parameters_select_the_languages(servers, m2m_runner):
    request = infer_request(TEXTS, source_language="en", target_language="de", max_output_tokens=str(MAX_NEW))
    response = servers.kserve.ModelInfer(request, timeout=60)
    texts = [t.decode() for t in deserialize_bytes(response.raw_output_contents[0], len(TEXTS))]
    opts = DecodeOptions(source_language="en", target_language="de", max_output_tokens=MAX_NEW)
    assert texts == [reference(m2m_runner, t, opts)[0].text for t in TEXTS]


@pytest.mark.parametrize(("parameters", "message"), [
    ({"source_language": "en"}, "set target_language"),
    ({"source_language": "en", "target_language": "xx"}, "unknown target_language 'xx'"),
    ({"source_language": "", "target_language": "de"}, "set source_language"),
])
def test_kserve_language_errors(servers, parameters, message):
    assert message in refused(servers.kserve.ModelInfer, infer_request(TEXTS[:1], **parameters), timeout=30)


def test_a_language_parameter_must_be_a_string(servers):
    request = infer_request(TEXTS[:1], source_language="en")
    request.parameters["target_language"].int64_param = 3
    details = refused(servers.kserve.ModelInfer, request, timeout=30)
    assert "parameter target_language must be a string, got 3" in details


def test_a_model_of_one_pair_refuses_languages(servers):
    message = "target_language 'de' given, but this model translates one language pair"
    assert message in refused(translate, servers.plain_native, TEXTS[:1], target_language="de")
    assert message in refused(servers.plain_kserve.ModelInfer, infer_request(TEXTS[:1], target_language="de"),
                              timeout=30)
    details = refused(translate, servers.plain_native, TEXTS[:1], source_language="en")
    assert "source_language 'en' given" in details


def test_the_client_passes_the_languages(servers, m2m_runner):
    opts = DecodeOptions(source_language="ja", target_language="cs")
    want = "".join(reference(m2m_runner, t, opts)[0].text + "\n" for t in TEXTS[:2])
    for api in ([], ["--v2"]):
        out = io.StringIO()
        args = ["--address", servers.m2m.address, "--source-language", "ja", "--target-language", "cs", *api]
        assert client.main([*args, *TEXTS[:2]], out=out) == 0
        assert out.getvalue() == want
