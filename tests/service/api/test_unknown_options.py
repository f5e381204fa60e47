"""A misspelt option is refused on every protocol that takes options by name, with the nearest known name;
the parameters Triton's clients send on their own pass (docs/api.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from service.config import ServerConfig
from service.server import BackgroundServer
from tests.support import conversation
from tests.support.http import post_json

TEXT = "we 7 big."
HINT = "unknown parameter 'min_length'; did you mean min_output_tokens?"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    """A server of the default bundle, both ports open."""
    config = ServerConfig(bundle=conversation.BUNDLE, port=0, http_port=0, metrics_port=-1,
                          providers=("CPUExecutionProvider",), max_batch_size=8)
    with BackgroundServer(config) as srv:
        yield srv


def _grpc_infer(server: BackgroundServer, target: str | None = None, **given: Any) -> v2.ModelInferResponse:
    """ModelInfer of TEXT (and TARGET) with these parameters (ints, bools and strings)."""
    request = v2.ModelInferRequest(model_name="translator")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(TEXT.encode())
    if target is not None:
        request.inputs.add(name="TARGET", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
            target.encode())
    for key, value in given.items():
        entry = request.parameters[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.int64_param = value
        else:
            entry.string_param = value
    with grpc.insecure_channel(server.address) as channel:
        return v2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)


def _http(server: BackgroundServer, endpoint: str, payload: dict[str, Any]) -> tuple[int, bytes]:
    status, _, body = post_json(f"http://{server.http_address}/v2/models/translator/{endpoint}", payload)
    return status, body


def test_grpc_infer_refuses_a_misspelt_option(server):
    with pytest.raises(grpc.RpcError) as refused:
        _grpc_infer(server, min_length=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details() == HINT


def test_grpc_score_refuses_an_unknown_name(server):
    with pytest.raises(grpc.RpcError) as refused:
        _grpc_infer(server, target="we seven big.", target_langauge="de")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown parameter 'target_langauge'; did you mean target_language?" in refused.value.details()


@pytest.mark.parametrize(("endpoint", "payload"), [
    ("infer", {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [TEXT]}],
               "parameters": {"min_length": 30}}),
    ("generate", {"text_input": TEXT, "parameters": {"min_length": 30}}),
    ("generate", {"text_input": TEXT, "min_length": 30}),
    ("generate_stream", {"text_input": TEXT, "parameters": {"min_length": 30}}),
    ("score", {"source": TEXT, "target": "we seven big.", "parameters": {"min_length": 30}}),
])
def test_http_refuses_a_misspelt_option(server, endpoint, payload):
    status, body = _http(server, endpoint, payload)
    assert status == 400
    wanted = HINT if endpoint != "score" else "'min_length' does not apply to scoring"
    unknown = endpoint == "score" and b"unknown parameter 'min_length'" in body
    assert wanted.encode() in body or unknown, body


def test_http_score_suggests_its_own_options(server):
    status, body = _http(server, "score", {"source": TEXT, "target": "we seven big.", "return_token": True})
    assert status == 400 and b"did you mean return_tokens?" in body


def test_the_parameters_triton_clients_send_pass(server):
    """sequence_id, priority, timeout and triton_* names change nothing about the answer."""
    plain = _grpc_infer(server)
    sent = _grpc_infer(server, sequence_id=7, sequence_start=True, sequence_end=True, priority=1,
                       timeout=60_000_000, triton_enable_empty_final_response=False, triton_other="x")
    assert sent.raw_output_contents == plain.raw_output_contents and plain.raw_output_contents
