"""KServe v2 REST through Triton's own `tritonclient.http`, unchanged, in JSON and binary tensor data
modes, against the same references as the gRPC tests; Triton's /config, /stats and repository
extension; errors as JSON with the status table's HTTP codes; request metrics with a protocol
label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import assert_distinct, best_texts
from tests.support.http import post_json, text_input, triton_http_client
from tests.support.server import MAX_BATCH, TEXTS, server_config

INFER = "/v2/models/{model}/infer"


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with its HTTP port open (a free one)."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


@pytest.fixture
def client(http_server: BackgroundServer) -> Iterator[triton_http.InferenceServerClient]:
    """tritonclient.http's client of the server."""
    with triton_http_client(http_server.http_address) as c:
        yield c


def texts_of(result: triton_http.InferResult) -> list[str]:
    """The TRANSLATION elements as strings (tritonclient gives bytes from binary data, str from JSON)."""
    return [t.decode("utf-8") if isinstance(t, bytes) else t for t in result.as_numpy("TRANSLATION").tolist()]


def test_health_and_metadata(client):
    """Live, ready, server and model metadata, model readiness (by version too; an unknown model is
    not ready), as tritonclient.http reads them."""
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert {"binary_tensor_data", "generate", "model_repository", "statistics"} <= set(meta["extensions"])
    model = client.get_model_metadata("translator")
    assert model["name"] == "translator" and model["versions"] == ["1"]
    assert model["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    assert model["outputs"] == [{"name": "TRANSLATION", "datatype": "BYTES", "shape": [-1]}]
    assert client.get_model_metadata("translator", "1")["name"] == "translator"
    assert client.is_model_ready("translator") and client.is_model_ready("translator", "1")
    assert not client.is_model_ready("no-such-model")
    with pytest.raises(InferenceServerException, match="unknown model") as err:
        client.get_model_metadata("no-such-model")
    assert err.value.status() == "404"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_matches_the_reference(client, runner, binary):
    """infer in JSON and in binary tensor data mode returns the reference translations, with the
    request id; v2 parameters (beam_size, max_tokens) decode as over gRPC."""
    want = best_texts(runner, TEXTS)
    assert_distinct(want)
    output = triton_http.InferRequestedOutput("TRANSLATION", binary_data=binary)
    result = client.infer("translator", [text_input(TEXTS, binary)], request_id="h-1", outputs=[output])
    assert result.get_response()["id"] == "h-1" and result.get_response()["model_version"] == "1"
    assert texts_of(result) == want
    beam = client.infer("translator", [text_input(TEXTS[:2], binary)], model_version="1",
                        parameters={"beam_size": 2, "max_tokens": 7}, outputs=[output])
    assert texts_of(beam) == best_texts(runner, TEXTS[:2], DecodeOptions(beam_size=2, max_output_tokens=7))


def test_infer_without_requested_outputs_answers_binary(client, runner):
    """With no outputs named, tritonclient asks binary_data_output: the answer is binary tensor data."""
    result = client.infer("translator", [text_input(TEXTS[:2], binary=False)])
    assert result.get_output("TRANSLATION")["parameters"]["binary_data_size"] > 0
    assert texts_of(result) == best_texts(runner, TEXTS[:2])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_errors_are_json_with_the_table_codes(client, binary):
    """Bad input is 400 with the codec's reason, an unknown model 404; the server serves after."""
    too_many = [TEXTS[0]] * (MAX_BATCH + 1)
    cases = [
        (lambda: client.infer("translator", [text_input(too_many, binary)]), "400", "at most"),
        (lambda: client.infer("translator", [text_input(TEXTS[:1], binary)], parameters={"beam_size": 0}),
         "400", "beam_size"),
        (lambda: client.infer("translator", [text_input(TEXTS[:1], binary)],
                              parameters={"max_tokens": "many"}), "400", "whole number"),
        (lambda: client.infer("nope", [text_input(TEXTS[:1], binary)]), "404", "unknown model"),
    ]
    for call, status, phrase in cases:
        with pytest.raises(InferenceServerException, match=phrase) as err:
            call()
        assert err.value.status() == status
    assert client.infer("translator", [text_input(TEXTS[:1], binary)]).as_numpy("TRANSLATION").size == 1


def test_wrong_datatype_and_shape_mismatch_are_400(http_server):
    """JSON tensors whose datatype, data or shape are wrong: 400 with the reason."""
    url = f"http://{http_server.http_address}/v2/models/translator/infer"
    cases = [
        ({"inputs": [{"name": "TEXT", "shape": [1], "datatype": "FP32", "data": [1.0]}]}, "datatype FP32"),
        ({"inputs": [{"name": "TEXT", "shape": [3], "datatype": "BYTES", "data": ["a", "b"]}]},
         "shape declares 3 elements but data holds 2"),
        ({"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [7]}]}, "must hold strings"),
        ({"inputs": [{"name": "TEXT", "shape": "1", "datatype": "BYTES", "data": ["a"]}]}, "shape"),
        ({"inputs": {"name": "TEXT"}}, "inputs must be a list"),
        ({"inputs": [{"name": "X", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}, "TEXT"),
        ([1, 2], "JSON object"),
    ]
    for payload, phrase in cases:
        status, kind, body = post_json(url, payload)
        assert status == 400 and kind == "application/json", (payload, body)
        assert phrase in body.decode(), (payload, body)


def test_config_and_statistics(client):
    """Triton's /config reports the real batching settings; /stats counts the successes."""
    config = client.get_model_config("translator")
    assert config["name"] == "translator" and config["max_batch_size"] == 0
    assert config["parameters"]["max_batch_size"] == {"string_value": str(MAX_BATCH)}
    client.infer("translator", [text_input(TEXTS[:1], binary=True)])
    stats = client.get_inference_statistics("translator")["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("translator", "1")]
    assert stats[0]["inference_stats"]["success"]["count"] >= 1
    assert isinstance(stats[0]["inference_count"], int)
    assert client.get_inference_statistics()["model_stats"][0]["name"] == "translator"


def test_repository_extension(client):
    """The index lists the model READY; under control mode none load and unload are refused (400)
    with the reason, as over gRPC."""
    index = client.get_model_repository_index()
    assert [(m["name"], m["state"]) for m in index] == [("translator", "READY")]
    for call in (lambda: client.load_model("translator"), lambda: client.unload_model("translator")):
        with pytest.raises(InferenceServerException, match="control mode is 'none'") as err:
            call()
        assert err.value.status() == "400"


def test_requests_are_counted_with_the_protocol_label(client):
    """Each HTTP request is one sample of the request metrics, labelled protocol="http"."""
    def count(code: str) -> float:
        return metrics.counter_value(metrics.REQUESTS, method=INFER, code=code, protocol="http")

    ok, bad = count("OK"), count("INVALID_ARGUMENT")
    latency = metrics.histogram_count(metrics.REQUEST_LATENCY, method=INFER, protocol="http")
    client.infer("translator", [text_input(TEXTS[:1], binary=True)])
    with pytest.raises(InferenceServerException):
        client.infer("translator", [text_input(TEXTS[:1], binary=True)], parameters={"beam_size": 0})
    assert (count("OK"), count("INVALID_ARGUMENT")) == (ok + 1, bad + 1)
    assert metrics.histogram_count(metrics.REQUEST_LATENCY, method=INFER, protocol="http") == latency + 2
    assert metrics.counter_value(metrics.REQUESTS, method=INFER, protocol="grpc") == 0


def test_every_route_has_its_series_from_the_start(http_server):
    """Each route x common code exists at start-up with protocol="http" (rate() sees a first call)."""
    labels = {(x.labels["method"], x.labels["code"]) for family in metrics.REQUESTS.collect()
              for x in family.samples if x.name.endswith("_total") and x.labels.get("protocol") == "http"}
    for route in ("/v2/models/{model}/versions/{version}/generate_stream", "/v2/health/ready", INFER,
                  "/v2/repository/models/{model}/load"):
        assert {(route, code) for code in metrics.COMMON_CODES} <= labels, route
