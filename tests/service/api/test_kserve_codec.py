"""KServe v2 as plain data (service/dataplane/kserve.py) and its gRPC form (service/api/grpc/kserve.py):
round trips against tritonclient's own helpers, every rejection message, and the request parameters as the
KServe v2 data plane reads them (service/dataplane/parameters.py)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2 as triton_service
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from protos.inference import grpc_service_pb2
from service.api.grpc.kserve import infer_request, infer_response
from service.dataplane import kserve
from service.dataplane.calls import DataPlane
from service.dataplane.kserve import deserialize_bytes, serialize_bytes
from service.dataplane.parameters import Asked
from service.domain.errors import InvalidTensor
from service.domain.types import DecodeOptions
from tests.support.kserve import text_input

TEXTS = ["hello world", "", "gr\u00fc\u00dfe \u2603 \U0001f600", "tab\tnew\nline", "nul\x00inside"]


def _client_request(texts: list[str], **kwargs) -> triton_service.ModelInferRequest:
    """The exact ModelInferRequest tritonclient's `infer` would send for a TEXT input."""
    args = dict(model_name="translator", inputs=[text_input(texts)], model_version="", request_id="",
                outputs=None, sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                timeout=None, parameters=None)
    return _get_inference_request(**(args | kwargs))


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


def _read(request: triton_service.ModelInferRequest) -> Asked:
    """What the KServe v2 data plane reads from a translation request's parameters."""
    return DataPlane._translation(infer_request(request))[1]


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
    wire = _client_request(
        TEXTS, request_id="abc", priority=2, outputs=[triton_grpc.InferRequestedOutput("TRANSLATION")],
        parameters={"beam_size": 4, "max_tokens": "12"},
    ).SerializeToString()
    request = message_module.ModelInferRequest.FromString(wire)
    plain = infer_request(request)
    assert (plain.model, plain.id, plain.outputs) == ("translator", "abc", ["TRANSLATION"])
    assert plain.parameters == {"beam_size": 4, "max_tokens": "12", "priority": 2}
    assert kserve.translation_texts(plain) == TEXTS
    assert _read(request) == Asked(DecodeOptions(max_output_tokens=12, beam_size=4))


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
    request = _client_request(["a"], outputs=[triton_grpc.InferRequestedOutput("TRANSLATION")])
    assert _texts(request) == _texts(_client_request(["a"])) == ["a"]
    request.outputs.add(name="SCORES")
    expected = r"^unknown output 'SCORES': this model's only output is TRANSLATION$"
    with pytest.raises(InvalidTensor, match=expected):
        _texts(request)


def _params(**values) -> triton_service.ModelInferRequest:
    """A tritonclient request of one text with these parameters, values typed like the client types them."""
    return _client_request(["a"], parameters=values)


def test_parameters_accepted_forms() -> None:
    """int64, uint64 and decimal strings are read; Triton-reserved keys pass (its `timeout`, in
    microseconds, sets the deadline)."""
    assert _read(_client_request(["a"])) == Asked(DecodeOptions())
    assert _read(_params(max_output_tokens=30, beam_size="  5 ")) == Asked(DecodeOptions(max_output_tokens=30,
                                                                                         beam_size=5))
    request = _client_request(["a"], priority=3, timeout=1000, sequence_id=5, sequence_start=True,
                              sequence_end=True)  # uint64 priority, int64 timeout
    request.parameters["beam_size"].uint64_param = 2
    request.parameters["binary_data_output"].bool_param = True
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    asked = _read(request)
    assert asked.options == DecodeOptions(beam_size=2) and asked.deadline is not None


@pytest.mark.parametrize(("name", "near"), [("bem_size", "beam_size"),
                                            ("max_new_tokens", "max_output_tokens"),
                                            ("presence_penalty", "repetition_penalty")])
def test_unknown_parameters_are_refused_with_the_nearest_name(name: str, near: str) -> None:
    """A parameter name the server does not know is refused, naming the nearest known one."""
    with pytest.raises(InvalidTensor) as info:
        _read(_params(max_tokens=7, **{name: 2}))
    assert str(info.value) == f"unknown parameter {name!r}; did you mean {near}?"


NOT_INTEGER = "must be an integer (or a decimal string), got"
NOT_WHOLE = "must be a whole number, got string"
NOT_NUMBER = "must be a number (or a decimal string), got"
NOT_FLAG = 'must be a boolean (or the string "true" / "false"), got'


def _either(first: str, second: str) -> tuple[str, str]:
    """The message refusing two names for one option, in either order (the parameters map's order)."""
    return f"give either {first} or {second}, not both", f"give either {second} or {first}, not both"


PARAMETER_ERRORS = {
    "both aliases": (dict(max_output_tokens=5, max_tokens=5), _either("max_output_tokens", "max_tokens")),
    "bool": (dict(beam_size=True), f"parameter beam_size {NOT_INTEGER} True"),
    "double": (dict(max_tokens=2.5), f"parameter max_tokens {NOT_INTEGER} 2.5"),
    "non-numeric string": (dict(beam_size="four"), f"parameter beam_size {NOT_WHOLE} 'four'"),
    "negative string": (dict(beam_size="-2"), f"parameter beam_size {NOT_WHOLE} '-2'"),
    "non-ascii digits": (dict(beam_size="\u0663"), f"parameter beam_size {NOT_WHOLE} '\u0663'"),
    "zero": (dict(max_output_tokens=0), "parameter max_output_tokens must be >= 1, got 0"),
    "negative": (dict(beam_size=-3), "parameter beam_size must be >= 1, got -3"),
    "zero string": (dict(beam_size="0"), "parameter beam_size must be >= 1, got 0"),
}


def _refused(request: triton_service.ModelInferRequest, message: str | tuple[str, ...]) -> None:
    """The request's parameters are refused with this message (one of these messages)."""
    with pytest.raises(InvalidTensor) as info:
        _read(request)
    assert str(info.value) in ((message,) if isinstance(message, str) else message)


@pytest.mark.parametrize("case", list(PARAMETER_ERRORS))
def test_invalid_parameters(case: str) -> None:
    """Every malformed decoding parameter is rejected with its own message."""
    values, message = PARAMETER_ERRORS[case]
    _refused(_params(**values), message)


def test_parameter_without_value() -> None:
    """A parameter entry whose oneof is unset is rejected."""
    request = _client_request(["a"])
    request.parameters["beam_size"].Clear()
    _refused(request, "parameter beam_size has no value")


def test_stream_flags() -> None:
    """`stream` and tritonclient's empty-final-response flag read as bool_param or "true" / "false"."""
    assert _read(_params(stream=True)) == Asked(DecodeOptions(), stream=True)
    assert _read(_params(stream=" FALSE ", beam_size=2)) == Asked(DecodeOptions(beam_size=2))
    request = _client_request(["a"], parameters={"stream": "true"})
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    assert _read(request) == Asked(DecodeOptions(), stream=True, empty_final_response=True)
    for value, shown in ((1, "1"), ("yes", "'yes'"), (0.0, "0.0")):
        _refused(_params(stream=value), f"parameter stream {NOT_FLAG} {shown}")


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


# ----- controlled decoding: every option of docs/api.md as a parameter ---------------------------------
def test_controlled_decoding_parameters() -> None:
    """Each option is read into its DecodeOptions field, in every accepted form; JSON arrays (gRPC: a JSON
    string) become tuples; unset ones stay None (the model's default)."""
    assert _read(_params()).options == DecodeOptions()
    given = _params(min_output_tokens=3, length_penalty=0.6, max_length_ratio=1.5, repetition_penalty=1.2,
                    no_repeat_ngram_size=0, temperature=0.0, top_k=5, top_p=0.9, seed=42, disable_unk=True,
                    target_prefix="the cat", suppress_sequences='["red", [5, 6], [7]]')
    assert _read(given).options == DecodeOptions(
        min_output_tokens=3, length_penalty=0.6, max_length_ratio=1.5, repetition_penalty=1.2,
        no_repeat_ngram_size=0, temperature=0.0, top_k=5, top_p=0.9, seed=42, disable_unk=True,
        target_prefix="the cat", suppress_sequences=("red", (5, 6), (7,)))
    # numbers as ints or decimal strings, counts as strings, flags as strings, the min_tokens alias
    options = _read(_params(min_tokens="0", temperature=1, top_p=" 0.5 ", top_k="2", seed="7",
                            disable_unk="false", target_prefix_ids="[1, 2, 3]")).options
    assert options == DecodeOptions(min_output_tokens=0, temperature=1.0, top_p=0.5, top_k=2, seed=7,
                                    target_prefix=(1, 2, 3))
    request = _client_request(["a"])
    request.parameters["seed"].uint64_param = 2**63 - 1
    request.parameters["repetition_penalty"].uint64_param = 2
    assert _read(request).options == DecodeOptions(seed=2**63 - 1, repetition_penalty=2.0)


CONTROL_ERRORS = {
    "temperature bool": (dict(temperature=True), f"parameter temperature {NOT_NUMBER} True"),
    "top_p word": (dict(top_p="high"), "parameter top_p must be a finite number, got string 'high'"),
    "top_p nan": (dict(top_p="nan"), "parameter top_p must be a finite number, got string 'nan'"),
    "repetition_penalty inf": (dict(repetition_penalty=float("inf")),
                               "parameter repetition_penalty must be a finite number, got inf"),
    "top_k fraction": (dict(top_k=1.5), f"parameter top_k {NOT_INTEGER} 1.5"),
    "top_k negative": (dict(top_k=-1), "parameter top_k must be >= 0, got -1"),
    "seed negative": (dict(seed=-5), "parameter seed must be >= 0, got -5"),
    "ngram string": (dict(no_repeat_ngram_size="two"), f"parameter no_repeat_ngram_size {NOT_WHOLE} 'two'"),
    "min tokens negative": (dict(min_output_tokens=-1), "parameter min_output_tokens must be >= 0, got -1"),
    "min aliases": (dict(min_output_tokens=1, min_tokens=1), _either("min_output_tokens", "min_tokens")),
    "disable_unk int": (dict(disable_unk=1), f"parameter disable_unk {NOT_FLAG} 1"),
    "prefix number": (dict(target_prefix=3), "parameter target_prefix must be a string, got 3"),
    "both prefixes": (dict(target_prefix="a", target_prefix_ids="[1]"),
                      _either("target_prefix", "target_prefix_ids")),
    "prefix ids not json": (dict(target_prefix_ids="1 2"),
                            "parameter target_prefix_ids must be a JSON array, got string '1 2'"),
    "prefix ids number": (dict(target_prefix_ids=5),
                          "parameter target_prefix_ids must be a JSON array, got 5"),
    "prefix ids texts": (dict(target_prefix_ids='["a"]'),
                         "parameter target_prefix_ids must be an array of integer token ids, got ['a']"),
    "prefix ids empty": (dict(target_prefix_ids="[]"),
                         "parameter target_prefix_ids is an empty array: leave it out for none"),
    "suppress empty": (dict(suppress_sequences="[]"),
                       "parameter suppress_sequences is an empty array: leave it out for none"),
    "suppress object": (dict(suppress_sequences='{"a": 1}'),
                        "parameter suppress_sequences must be a JSON array, got string '{\"a\": 1}'"),
    "suppress bad item": (dict(suppress_sequences="[[1, true]]"),
                          "parameter suppress_sequences[0] must be an array of integer token ids, "
                          "got [1, True]"),
    "suppress number item": (dict(suppress_sequences="[\"a\", 3]"),
                             "parameter suppress_sequences[1] must be an array of integer token ids, got 3"),
    "n_best": (dict(n_best=2), "parameter n_best is not offered here: the TRANSLATION output holds one "
               "translation per text (translator.v1 Translate returns several)"),
    "alternatives": (dict(return_alternatives=True), "parameter return_alternatives is not offered here: "
                     "the TRANSLATION output holds one translation per text (translator.v1 Translate "
                     "returns several)"),
}


@pytest.mark.parametrize("case", list(CONTROL_ERRORS))
def test_invalid_control_parameters(case: str) -> None:
    """A controlled-decoding parameter of the wrong type is refused with a message naming it."""
    values, message = CONTROL_ERRORS[case]
    _refused(_params(**values), message)
