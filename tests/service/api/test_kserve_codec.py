"""KServe v2 as plain data (service/dataplane/kserve.py) and its gRPC form (service/api/grpc/kserve.py):
round trips against tritonclient's own helpers and every rejection message (the request parameters:
test_kserve_parameters.py)."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2 as triton_service
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from protos.inference import grpc_service_pb2
from service.api.grpc.kserve import infer_request, infer_response
from service.dataplane import kserve
from service.dataplane.calls import kserve_translation
from service.dataplane.kserve import deserialize_bytes, serialize_bytes
from service.dataplane.parameters import Asked
from service.domain.errors import InvalidTensor
from service.domain.types import DecodeOptions
from tests.support.kserve import client_request

TEXTS = ["hello world", "", "gr\u00fc\u00dfe \u2603 \U0001f600", "tab\tnew\nline", "nul\x00inside"]


def _raw_request(raw: bytes, shape: list[int], datatype: str = "BYTES") -> triton_service.ModelInferRequest:
    """A hand-made request with one TEXT input and the given raw contents."""
    request = triton_service.ModelInferRequest(model_name="translator", raw_input_contents=[raw])
    request.inputs.add(name="TEXT", datatype=datatype, shape=shape)
    return request


def _typed_request(elements: list[bytes], shape: list[int]) -> triton_service.ModelInferRequest:
    """A request carrying TEXT in typed form (contents.bytes_contents)."""
    request = triton_service.ModelInferRequest(model_name="translator")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=shape)
    tensor.contents.bytes_contents.extend(elements)
    return request


def _texts(request: triton_service.ModelInferRequest) -> list[str]:
    """The texts of a translation request's TEXT input, as the KServe v2 data plane reads them."""
    return kserve.translation_texts(infer_request(request))


def _prefixed(*elements: bytes) -> bytes:
    """Length-prefixed elements, written independently of the codec."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def test_serialize_bytes_matches_tritonclient() -> None:
    """Our raw BYTES encoding is byte-identical to tritonclient.utils.serialize_byte_tensor."""
    elements = [t.encode("utf-8") for t in TEXTS]
    expected = serialize_byte_tensor(np.array(elements, dtype=np.object_)).item()
    assert serialize_bytes(elements) == expected == _prefixed(*elements)
    assert deserialize_bytes(expected, len(elements)) == elements
    assert deserialize_bytes_tensor(serialize_bytes(elements)).tolist() == elements


@pytest.mark.parametrize("message_module", [triton_service, grpc_service_pb2], ids=["tritonclient", "ours"])
def test_decode_request_built_by_tritonclient(message_module) -> None:
    """A request made by tritonclient's InferInput decodes to the original texts and options."""
    wire = client_request(
        TEXTS, request_id="abc", priority=2, outputs=[triton_grpc.InferRequestedOutput("TRANSLATION")],
        parameters={"beam_size": 4, "max_tokens": "12"},
    ).SerializeToString()
    request = message_module.ModelInferRequest.FromString(wire)
    plain = infer_request(request)
    assert (plain.model, plain.id, plain.outputs) == ("translator", "abc", ["TRANSLATION"])
    assert plain.parameters == {"beam_size": 4, "max_tokens": "12", "priority": 2}
    assert kserve.translation_texts(plain) == TEXTS
    assert kserve_translation(plain)[1] == Asked(DecodeOptions(max_output_tokens=12, beam_size=4))


def test_decode_typed_bytes_contents() -> None:
    """The typed form (one bytes_contents entry per element, no prefixes) decodes too."""
    elements = [t.encode("utf-8") for t in TEXTS]
    assert _texts(_typed_request(elements, [len(elements)])) == TEXTS


def test_encoded_output_reads_back_with_as_numpy() -> None:
    """tritonclient's InferResult.as_numpy returns exactly the texts we encoded, with shape [N]."""
    output = kserve.translation_output(TEXTS)
    response = infer_response(kserve.InferResponse("translator", "1", "abc", [output]))
    assert list(response.outputs[0].shape) == [len(TEXTS)] and response.outputs[0].datatype == "BYTES"
    wire = response.SerializeToString()
    result = triton_grpc.InferResult(triton_service.ModelInferResponse.FromString(wire))
    array = result.as_numpy("TRANSLATION")
    assert array.shape == (len(TEXTS),)
    assert [b.decode("utf-8") for b in array.tolist()] == TEXTS


def test_every_output_has_its_raw_entry() -> None:
    """Raw output entries stay aligned with outputs, BYTES and numeric ones alike (tritonclient reads each
    output from the raw entry of its index)."""
    counts = kserve.Output("TOKEN_COUNT", "INT32", [2], np.array([3, 4], np.int32))
    response = infer_response(kserve.InferResponse("translator", "1", "r", [
        kserve.translation_output(["x", "y"]), counts]))
    assert len(response.raw_output_contents) == len(response.outputs) == 2
    wire = response.SerializeToString()
    result = triton_grpc.InferResult(triton_service.ModelInferResponse.FromString(wire))
    assert result.as_numpy("TRANSLATION").tolist() == [b"x", b"y"]
    assert result.as_numpy("TOKEN_COUNT").tolist() == [3, 4]


def _no_inputs() -> triton_service.ModelInferRequest:
    """A request without any input tensor."""
    return triton_service.ModelInferRequest(model_name="translator")


def _two_inputs() -> triton_service.ModelInferRequest:
    """A request with TEXT and one more input."""
    request = _raw_request(_prefixed(b"a"), [1])
    request.inputs.add(name="X", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(_prefixed(b"b"))
    return request


def _renamed() -> triton_service.ModelInferRequest:
    """A request whose single input has the wrong name."""
    request = _raw_request(_prefixed(b"a"), [1])
    request.inputs[0].name = "SOURCE"
    return request


def _raw_and_typed() -> triton_service.ModelInferRequest:
    """A request with both raw and typed data for TEXT."""
    request = _raw_request(_prefixed(b"a"), [1])
    request.inputs[0].contents.bytes_contents.append(b"a")
    return request


def _two_raw_entries() -> triton_service.ModelInferRequest:
    """One input but two raw_input_contents entries."""
    request = _raw_request(_prefixed(b"a"), [1])
    request.raw_input_contents.append(_prefixed(b"b"))
    return request


def _no_data() -> triton_service.ModelInferRequest:
    """TEXT declared with shape [1] but carrying no data at all."""
    request = triton_service.ModelInferRequest()
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    return request


def _wrong_typed_list() -> triton_service.ModelInferRequest:
    """BYTES data sent in a numeric typed list."""
    request = _no_data()
    request.inputs[0].contents.int64_contents.append(7)
    return request


ERROR_CASES = {
    "missing input": (_no_inputs, "missing input TEXT: the request has no inputs"),
    "wrong name": (_renamed, "expected exactly one input named TEXT, got 'SOURCE'"),
    "two inputs": (_two_inputs, "expected exactly one input named TEXT, got 'TEXT', 'X'"),
    "wrong datatype": (lambda: _raw_request(b"\0\0\0\0", [1], "FP32"),
                       "input TEXT has datatype FP32, expected BYTES"),
    "empty datatype": (lambda: _raw_request(b"", [1], ""), "input TEXT has datatype (empty), expected BYTES"),
    "2-D shape": (lambda: _raw_request(_prefixed(b"a", b"b"), [1, 2]),
                  "input TEXT must be 1-D with shape [N], got shape [1, 2]"),
    "scalar shape": (lambda: _raw_request(_prefixed(b"a"), []),
                     "input TEXT must be 1-D with shape [N], got shape []"),
    "negative shape": (lambda: _raw_request(_prefixed(b"a"), [-1]),
                       "input TEXT has invalid shape [-1]: N must be the element count"),
    "empty shape": (lambda: _raw_request(b"", [0]),
                    "input TEXT is empty (shape [0]): send at least one text"),
    "fewer raw elements than shape": (lambda: _raw_request(_prefixed(b"a", b"b"), [3]),
                                      "shape declares 3 elements but raw_input_contents holds only 2"),
    "more raw elements than shape": (lambda: _raw_request(_prefixed(b"a", b"b"), [1]),
                                     "shape declares 1 elements but raw_input_contents holds 2"),
    "truncated element": (lambda: _raw_request(struct.pack("<I", 10) + b"abc", [1]),
                          "truncated BYTES tensor in raw_input_contents: element 0 declares 10 bytes but "
                          "only 3 remain"),
    "truncated prefix": (lambda: _raw_request(_prefixed(b"ok") + b"\x05\x00", [2]),
                         "truncated BYTES tensor in raw_input_contents: element 1 needs a 4-byte length "
                         "prefix but only 2 bytes remain"),
    "trailing garbage": (lambda: _raw_request(_prefixed(b"ok") + b"\x01", [1]),
                         "trailing garbage in raw_input_contents: 1 unexpected byte(s) after the 1 "
                         "element(s) declared by the shape"),
    "trailing partial element": (lambda: _raw_request(_prefixed(b"ok") + struct.pack("<I", 9) + b"x", [1]),
                                 "trailing garbage in raw_input_contents: 5 unexpected byte(s) after the 1 "
                                 "element(s) declared by the shape"),
    "not utf-8": (lambda: _raw_request(_prefixed(b"fine", b"ab\xffcd"), [2]),
                  "element 1 of input TEXT is not valid UTF-8 (invalid start byte at byte 2)"),
    "truncated utf-8": (lambda: _typed_request(["\u00fc".encode()[:1]], [1]),
                        "element 0 of input TEXT is not valid UTF-8 (unexpected end of data at byte 0)"),
    "raw and typed": (_raw_and_typed,
                      "input TEXT has both raw_input_contents and contents.bytes_contents: send only one"),
    "raw entries per input": (_two_raw_entries, "raw_input_contents has 2 entries for 1 input(s)"),
    "no data": (_no_data, "input TEXT has no data: send raw_input_contents or contents.bytes_contents"),
    "wrong typed list": (_wrong_typed_list,
                         "BYTES data of input TEXT belongs in contents.bytes_contents, "
                         "got contents.int64_contents"),
    "typed count": (lambda: _typed_request([b"a", b"b"], [3]),
                    "shape declares 3 elements but contents.bytes_contents holds 2"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_invalid_text_input(case: str) -> None:
    """Every malformed TEXT input is rejected with its own message."""
    build, message = ERROR_CASES[case]
    with pytest.raises(InvalidTensor) as info:
        _texts(build())
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_unknown_requested_output() -> None:
    """Asking for an output the model does not have is rejected; TRANSLATION or none is fine."""
    request = client_request(["a"], outputs=[triton_grpc.InferRequestedOutput("TRANSLATION")])
    assert _texts(request) == _texts(client_request(["a"])) == ["a"]
    request.outputs.add(name="SCORES")
    expected = r"^unknown output 'SCORES': this model's only output is TRANSLATION$"
    with pytest.raises(InvalidTensor, match=expected):
        _texts(request)


def test_final_flag_reads_back_with_tritonclient() -> None:
    """A streamed response's `final` is the bool `triton_final_response` that tritonclient's response
    carries; a unary response has none."""
    def decoded(final: bool | None) -> triton_service.ModelInferResponse:
        response = infer_response(kserve.InferResponse("translator", "1", "r", final=final))
        return triton_service.ModelInferResponse.FromString(response.SerializeToString())

    assert decoded(False).parameters["triton_final_response"].WhichOneof("parameter_choice") == "bool_param"
    assert decoded(False).parameters["triton_final_response"].bool_param is False
    assert decoded(True).parameters["triton_final_response"].bool_param is True
    assert "triton_final_response" not in decoded(None).parameters


def test_a_tensor_declaring_more_texts_than_the_server_takes_is_refused_before_its_data_is_split(monkeypatch):
    raw = serialize_bytes([b""] * 100_000)  # 400 KB of empty texts
    splits = []
    monkeypatch.setattr(kserve, "deserialize_bytes", lambda *a, **k: splits.append(a) or [])
    request = infer_request(_raw_request(raw, [100_000]))
    refused = re.escape("input TEXT declares 100000 texts; this server accepts at most 32 in one request "
                        "(max_batch_size)")
    with pytest.raises(InvalidTensor, match=refused):
        kserve_translation(request, most=32)
    assert not splits
    monkeypatch.undo()
    assert kserve_translation(infer_request(_raw_request(serialize_bytes([b"a"] * 32), [32])), most=32)[0] \
        == ["a"] * 32
