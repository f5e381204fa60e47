"""The request metrics' `model` and `version` labels in a server of two models (a/1; b/1 and b/2), over
gRPC (translator.v1, KServe v2) and HTTP: each request counts under the model and version that served
it; a name the repository lacks counts under the fixed UNKNOWN_MODEL label, never under its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton
from prometheus_client import REGISTRY

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.ops import metrics
from service.server import BackgroundServer
from tests.support.http import post_json
from tests.support.kserve import text_input, triton_client
from tests.support.polling import wait_until
from tests.support.repository import link_repository
from tests.support.server import server_config

TEXT = "we 5"
TRANSLATE = "translator.v1.Translator/Translate"
INFER = "inference.GRPCInferenceService/ModelInfer"
HTTP_INFER = "/v2/models/{model}/infer"
HTTP_GENERATE = "/v2/models/{model}/generate"
HTTP_GENERATE_VERSION = "/v2/models/{model}/versions/{version}/generate"
INVENTED = "invented-model-7f3a"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_bundle: Path) -> Path:
    """DIR/a/1, DIR/b/1 and DIR/b/2 (b serves all its versions): the tiny bundle three times."""
    return link_repository(tmp_path_factory.mktemp("repository"), tiny_bundle, (("a", 1), ("b", 1), ("b", 2)),
                           {"b": {"version_policy": {"all": {}}}})


@pytest.fixture(scope="module")
def server(repository: Path, tiny_bundle: Path) -> Iterator[BackgroundServer]:
    """Control mode none (every model loads at start), HTTP on a free port."""
    with BackgroundServer(server_config(tiny_bundle, model_repository=repository, http_port=0)) as srv:
        yield srv


@pytest.fixture(scope="module")
def translator(server: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    """A translator.v1 stub."""
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[triton.InferenceServerClient]:
    """tritonclient.grpc."""
    with triton_client(server.address) as c:
        yield c


def count(method: str, model: str, version: str | None = None, code: str = "OK",
          protocol: str = "grpc") -> float:
    """requests_total of one method, code and model (and version, if given)."""
    labels = {"method": method, "code": code, "protocol": protocol, "model": model}
    if version is not None:
        labels["version"] = version
    return metrics.counter_value(metrics.REQUESTS, **labels)


def latency_count(method: str, model: str, version: str, protocol: str = "grpc") -> float:
    """Observations of request_latency_seconds of one method and model version."""
    return metrics.histogram_count(metrics.REQUEST_LATENCY, method=method, protocol=protocol, model=model,
                                   version=version)


def model_label_values() -> set[str]:
    """Every value of the `model` label of the request series."""
    return {s.labels["model"] for family in REGISTRY.collect() for s in family.samples
            if s.name.startswith(("translator_requests", "translator_request_latency"))}


def test_each_model_version_has_zero_series_from_its_load(server):
    """A loaded model version's series of the methods that name a model exist at 0 (rate() sees the first
    call), over both protocols; server-level methods keep model ""."""
    series = {(s.labels["method"], s.labels["protocol"], s.labels["model"], s.labels["version"])
              for family in metrics.REQUESTS.collect() for s in family.samples if s.name.endswith("_total")}
    for model, version in (("a", "1"), ("b", "1"), ("b", "2")):
        assert (TRANSLATE, "grpc", model, version) in series
        assert (INFER, "grpc", model, version) in series
        assert (HTTP_INFER, "http", model, version) in series
    assert ("inference.GRPCInferenceService/ServerLive", "grpc", "", "") in series
    assert not any(m == "grpc.health.v1.Health/Check" and model for m, _, model, _ in series)


def test_grpc_requests_count_under_the_model_that_served_them(translator, client):
    before = {k: count(TRANSLATE, *k) for k in (("a", "1"), ("b", "2"), ("b", "1"))}
    infer_before = {k: count(INFER, *k) for k in (("a", "1"), ("b", "1"), ("b", "2"))}
    latency_before = latency_count(TRANSLATE, "a", "1")
    translator.Translate(pb.TranslateRequest(texts=[TEXT], model="a"), timeout=60)
    translator.Translate(pb.TranslateRequest(texts=[TEXT], model="b"), timeout=60)  # b's latest: 2
    translator.Translate(pb.TranslateRequest(texts=[TEXT], model="b", model_version="1"), timeout=60)
    client.infer("b", [text_input([TEXT])], model_version="1")
    # a call's sample is recorded as its handler returns, which may be just after the client has its answer
    wait_until(lambda: {k: count(TRANSLATE, *k) - v for k, v in before.items()}
               == {("a", "1"): 1, ("b", "2"): 1, ("b", "1"): 1}, "the translator.v1 samples")
    wait_until(lambda: {k: count(INFER, *k) - v for k, v in infer_before.items()}
               == {("a", "1"): 0, ("b", "1"): 1, ("b", "2"): 0}, "the KServe samples")
    wait_until(lambda: latency_count(TRANSLATE, "a", "1") == latency_before + 1, "the latency sample")


def test_failures_of_a_known_model_carry_it(translator):
    bad = count(TRANSLATE, "a", "1", code="INVALID_ARGUMENT")
    with pytest.raises(grpc.RpcError) as err:
        translator.Translate(pb.TranslateRequest(texts=[], model="a"), timeout=60)  # no texts
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    wait_until(lambda: count(TRANSLATE, "a", "1", code="INVALID_ARGUMENT") == bad + 1, "the sample")


def test_an_invented_model_name_counts_under_the_fixed_label(translator, client, server):
    unknown = count(TRANSLATE, metrics.UNKNOWN_MODEL, "", code="NOT_FOUND")
    unnamed = count(TRANSLATE, metrics.NO_MODEL, "", code="INVALID_ARGUMENT")
    for name in (INVENTED, "../etc"):
        with pytest.raises(grpc.RpcError):
            translator.Translate(pb.TranslateRequest(texts=[TEXT], model=name), timeout=60)
    with pytest.raises(triton.InferenceServerException):
        client.infer(INVENTED, [text_input([TEXT])])
    with pytest.raises(grpc.RpcError) as err:  # two models loaded: "" names none
        translator.Translate(pb.TranslateRequest(texts=[TEXT]), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status, _, _ = post_json(f"http://127.0.0.1:{server.running.http_port}/v2/models/{INVENTED}/generate",
                             {"text_input": TEXT})
    assert status == 404
    lost, none = metrics.UNKNOWN_MODEL, metrics.NO_MODEL
    wait_until(lambda: count(TRANSLATE, lost, "", code="NOT_FOUND") == unknown + 1, "the sample")
    wait_until(lambda: count(TRANSLATE, lost, "", code="INVALID_ARGUMENT") >= 1, "the sample")  # "../etc"
    wait_until(lambda: count(INFER, lost, "", code="NOT_FOUND") >= 1, "the sample")
    wait_until(lambda: count(HTTP_GENERATE, lost, "", code="NOT_FOUND", protocol="http") >= 1, "the sample")
    wait_until(lambda: count(TRANSLATE, none, "", code="INVALID_ARGUMENT") == unnamed + 1, "the sample")
    labels = model_label_values()
    assert INVENTED not in labels and "../etc" not in labels and metrics.UNKNOWN_MODEL in labels


def test_http_requests_count_under_the_url_model(server):
    url = f"http://127.0.0.1:{server.running.http_port}"
    ok_a = count(HTTP_GENERATE, "a", "1", protocol="http")
    ok_b = count(HTTP_GENERATE_VERSION, "b", "1", protocol="http")
    malformed = count(HTTP_INFER, "b", "2", code="INVALID_ARGUMENT", protocol="http")
    assert post_json(f"{url}/v2/models/a/generate", {"text_input": TEXT})[0] == 200
    status, _, body = post_json(f"{url}/v2/models/b/versions/1/generate", {"text_input": TEXT})
    assert status == 200 and json.loads(body)["model_version"] == "1"
    # refused before it reaches the repository: labelled by the URL's model
    assert post_json(f"{url}/v2/models/b/infer", {"inputs": "not a list"})[0] == 400
    wait_until(lambda: count(HTTP_GENERATE, "a", "1", protocol="http") == ok_a + 1, "the sample")
    wait_until(lambda: count(HTTP_GENERATE_VERSION, "b", "1", protocol="http") == ok_b + 1, "the sample")
    wait_until(lambda: count(HTTP_INFER, "b", "2", code="INVALID_ARGUMENT", protocol="http") == malformed + 1,
               "the sample")
