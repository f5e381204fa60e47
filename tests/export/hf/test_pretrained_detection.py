"""source_language "auto" end to end on imported many-to-many models (the tiny M2M100 and NLLB): a server of
the bundle detects each text's language and translates it exactly as a request naming that language."""

from __future__ import annotations

import json

import grpc
import pytest
import requests

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.server import BackgroundServer
from tests.support.server import server_config

pytestmark = pytest.mark.kernels

# sentences the detector reads with high confidence, short enough for the tiny models' 64 source tokens (their
# tokenizers, trained on made-up words, cut real words into letters), and each model's code of their language
SENTENCES = {
    "en": "The committee will meet again next week.",
    "de": "Der Ausschuss trifft sich nächste Woche wieder.",
    "ru": "Комитет снова соберется на следующей неделе.",
}
CODES = {"m2m100": {"en": "en", "de": "de", "ru": "ru"},
         "nllb": {"en": "eng_Latn", "de": "deu_Latn", "ru": None}}  # the tiny NLLB knows 3 codes, not Russian
TARGET = {"m2m100": "de", "nllb": "fra_Latn"}


@pytest.fixture(scope="module", params=["m2m100", "nllb"])
def served(request, hf_bundles):
    """(name, server) of a tiny many-to-many bundle with gRPC and HTTP."""
    with BackgroundServer(server_config(hf_bundles[request.param], http_port=0)) as server:
        yield request.param, server


def translate(stub, texts: list[str], source: str, target: str) -> pb.TranslateResponse:
    """translator.v1 Translate, greedy, up to 12 tokens."""
    options = pb.TranslateOptions(source_language=source, target_language=target, max_output_tokens=12,
                                  return_tokens=True)
    return stub.Translate(pb.TranslateRequest(texts=texts, options=options), timeout=60)


def test_auto_translates_each_text_as_its_detected_language(served):
    name, server = served
    known = [lang for lang, code in CODES[name].items() if code]
    texts = [SENTENCES[lang] for lang in known]
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        auto = translate(stub, texts, "auto", TARGET[name])
        for lang, result in zip(known, auto.results, strict=True):
            detected = result.detected_language
            assert detected.best.language == lang and detected.best.confidence >= 0.5
            assert detected.model_language == CODES[name][lang]
            (alone,) = translate(stub, [SENTENCES[lang]], CODES[name][lang], TARGET[name]).results
            assert list(result.hypotheses[0].token_ids) == list(alone.hypotheses[0].token_ids)
            assert not alone.HasField("detected_language")  # a named language is not detected


def test_auto_on_generate_reports_the_language_and_a_language_the_model_lacks_is_refused(served):
    name, server = served
    url = f"http://{server.http_address}/v2/models/translator/generate"
    body = {"text_input": SENTENCES["de"], "parameters": {"source_language": "auto",
                                                            "target_language": TARGET[name]}}
    answer = requests.post(url, json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["detected_language"]["model_language"] == CODES[name]["de"]
    if CODES[name]["ru"] is None:
        body["text_input"] = SENTENCES["ru"]
        refused = requests.post(url, json=body, timeout=60)
        assert refused.status_code == 400 and "does not" in refused.json()["error"], refused.text


def test_auto_on_kserve_infer_answers_each_texts_language_as_a_response_parameter(served):
    name, server = served
    texts = [SENTENCES["en"], SENTENCES["de"]]
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": texts}],
            "parameters": {"source_language": "auto", "target_language": TARGET[name]}}
    answer = requests.post(f"http://{server.http_address}/v2/models/translator/infer", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    detected = json.loads(answer.json()["parameters"]["detected_language"])
    assert [d["model_language"] for d in detected] == [CODES[name]["en"], CODES[name]["de"]]
