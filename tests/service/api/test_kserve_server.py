"""The KServe v2 service of the real server: Triton's own `tritonclient.grpc` round trip, and every
malformed-tensor / unknown-model error through our generated stubs."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import pytest
import tritonclient.grpc as triton

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from service.dataplane.kserve import serialize_bytes
from service.domain.types import DEFAULT_MAX_BEAM, DecodeOptions
from service.server import BackgroundServer
from tests.support.decoding import best_texts
from tests.support.kserve import text_input
from tests.support.server import MAX_BATCH, TEXTS


@pytest.fixture(scope="module")
def v2_stub(server: BackgroundServer) -> Iterator[v2_grpc.GRPCInferenceServiceStub]:
    """Our generated v2 stub."""
    with grpc.insecure_channel(server.address) as channel:
        yield v2_grpc.GRPCInferenceServiceStub(channel)


def utf8(texts: list[str]) -> list[bytes]:
    """The texts as the TRANSLATION tensor's elements."""
    return [t.encode() for t in texts]


def test_tritonclient_health_and_metadata(triton_client):
    """Liveness, readiness, server/model metadata and config through tritonclient; errors for the rest."""
    assert triton_client.is_server_live() and triton_client.is_server_ready()
    assert triton_client.is_model_ready("translator") and triton_client.is_model_ready("translator", "1")
    server = triton_client.get_server_metadata()
    assert server.name == "translator" and "parameters" in server.extensions
    meta = triton_client.get_model_metadata("translator")
    assert (meta.name, list(meta.versions), meta.platform) == ("translator", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("TEXT", "BYTES", [-1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("TRANSLATION", "BYTES", [-1])]
    config = triton_client.get_model_config("translator").config
    assert config.input[0].name == "TEXT"
    assert config.parameters["max_texts_per_request"].string_value == str(MAX_BATCH)
    with pytest.raises(triton.InferenceServerException, match="NOT_FOUND|unknown model"):
        triton_client.get_model_metadata("nope")
    assert triton_client.get_inference_statistics("translator").model_stats[0].name == "translator"
    index = triton_client.get_model_repository_index().models  # a --bundle server: a repository of one
    assert [(m.name, m.version, m.state) for m in index] == [("translator", "1", "READY")]
    with pytest.raises(triton.InferenceServerException, match="FAILED_PRECONDITION|control mode"):
        triton_client.unload_model("translator")  # control mode none (the default)
    assert "model_repository" in server.extensions
    with pytest.raises(triton.InferenceServerException, match="UNIMPLEMENTED|Unimplemented"):
        triton_client.get_system_shared_memory_status()


def test_tritonclient_infer_matches_runner(triton_client, runner):
    """tritonclient.infer returns runner.translate's texts, with and without parameters."""
    result = triton_client.infer("translator", [text_input(TEXTS)], request_id="t-1",
                          outputs=[triton.InferRequestedOutput("TRANSLATION")])
    assert result.get_response().id == "t-1" and result.get_response().model_version == "1"
    assert result.as_numpy("TRANSLATION").tolist() == utf8(best_texts(runner, TEXTS))
    beam = triton_client.infer("translator", [text_input(TEXTS[:2])], model_version="1",
                        parameters={"beam_size": 2, "max_tokens": 7})
    want = best_texts(runner, TEXTS[:2], DecodeOptions(beam_size=2, max_output_tokens=7))
    assert beam.as_numpy("TRANSLATION").tolist() == utf8(want)


def test_tritonclient_errors_and_streaming(triton_client, runner):
    """NOT_FOUND / INVALID_ARGUMENT statuses, and stream errors as messages next to results."""
    with pytest.raises(triton.InferenceServerException, match="unknown model 'other'") as err:
        triton_client.infer("other", [text_input(["we"])])
    assert err.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(triton.InferenceServerException, match="no loaded version '2'") as err:
        triton_client.infer("translator", [text_input(["we"])], model_version="2")
    assert err.value.status() == "StatusCode.NOT_FOUND"
    bad_beam = f"beam_size must be between 1 and {DEFAULT_MAX_BEAM}"
    with pytest.raises(triton.InferenceServerException, match=bad_beam) as err:
        triton_client.infer("translator", [text_input(["we"])], parameters={"beam_size": 99})
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    answers: queue.Queue = queue.Queue()
    triton_client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        triton_client.async_stream_infer("translator", [text_input(["the 4217 cat."])], request_id="a")
        triton_client.async_stream_infer("translator", [text_input([""])], request_id="b")
        got = [answers.get(timeout=30) for _ in range(2)]
    finally:
        triton_client.stop_stream()
    ok = [r for r, e in got if e is None]
    errors = [e for r, e in got if e is not None]
    assert len(ok) == 1
    assert ok[0].as_numpy("TRANSLATION").tolist() == utf8(best_texts(runner, ["the 4217 cat."]))
    assert len(errors) == 1 and str(errors[0]) == "[request id: b] text 0 is empty"


def raw_request(texts: list[str], model: str = "translator", **tensor) -> v2.ModelInferRequest:
    """A ModelInferRequest with one input (TEXT BYTES [N] unless overridden) in raw form."""
    fields = {"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)]} | tensor
    request = v2.ModelInferRequest(model_name=model, inputs=[v2.ModelInferRequest.InferInputTensor(**fields)])
    request.raw_input_contents.append(serialize_bytes(t.encode() for t in texts))
    return request


def truncated() -> v2.ModelInferRequest:
    """Two declared elements, the second cut short."""
    request = raw_request(["the cat.", "we"])
    request.raw_input_contents[0] = request.raw_input_contents[0][:-1]
    return request


def with_parameter(key: str, **value) -> v2.ModelInferRequest:
    """A valid request with one request parameter set."""
    request = raw_request(["we 7 big."])
    request.parameters[key].CopyFrom(v2.InferParameter(**value))
    return request


@pytest.mark.parametrize(("request_", "code", "match"), [
    (raw_request(["we"], name="INPUT"), "INVALID_ARGUMENT", "expected exactly one input named TEXT"),
    (raw_request(["we"], datatype="INT64"), "INVALID_ARGUMENT", "datatype INT64, expected BYTES"),
    (raw_request(["we"], shape=[1, 1]), "INVALID_ARGUMENT", "must be 1-D"),
    (raw_request([]), "INVALID_ARGUMENT", "is empty"),
    (truncated(), "INVALID_ARGUMENT", "truncated BYTES tensor"),
    (raw_request(["we"] * 2, shape=[3]), "INVALID_ARGUMENT", "shape declares 3 elements"),
    (raw_request(["we"] * (MAX_BATCH + 1)), "INVALID_ARGUMENT", f"at most {MAX_BATCH}"),
    (raw_request([" "]), "INVALID_ARGUMENT", "text 0 is empty"),
    (with_parameter("max_output_tokens", int64_param=0), "INVALID_ARGUMENT", "must be >= 1"),
    (with_parameter("max_tokens", int64_param=500), "INVALID_ARGUMENT",
     "max_output_tokens must be between 1 and"),
    (with_parameter("beam_size", double_param=2.0), "INVALID_ARGUMENT", "must be an integer"),
    (v2.ModelInferRequest(model_name="translator"), "INVALID_ARGUMENT", "missing input TEXT"),
    (raw_request(["we"], model="x"), "NOT_FOUND", "unknown model 'x'"),
])
def test_malformed_requests(v2_stub, request_, code, match):
    """Each malformed v2 request fails with its status and a message naming the problem."""
    with pytest.raises(grpc.RpcError) as err:
        v2_stub.ModelInfer(request_, timeout=30)
    assert err.value.code() == grpc.StatusCode[code]
    assert match in err.value.details()


def test_typed_contents_and_model_ready_errors(v2_stub, runner):
    """Typed bytes_contents work; ModelReady of an unknown version is NOT_FOUND."""
    request = v2.ModelInferRequest(model_name="translator", model_version="1", id="typed")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([t.encode() for t in TEXTS[:2]])
    response = v2_stub.ModelInfer(request, timeout=30)
    assert response.id == "typed" and [o.name for o in response.outputs] == ["TRANSLATION"]
    assert list(response.outputs[0].shape) == [2]
    assert response.raw_output_contents[0] == serialize_bytes(utf8(best_texts(runner, TEXTS[:2])))
    assert v2_stub.ModelReady(v2.ModelReadyRequest(name="translator", version="")).ready
    with pytest.raises(grpc.RpcError) as err:
        v2_stub.ModelReady(v2.ModelReadyRequest(name="translator", version="7"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "no version '7'" in err.value.details()
