"""KServe v2 request parameters as the data plane reads them from the protobuf tritonclient sends
(service/dataplane/parameters.py through service/api/grpc/kserve.py): the accepted forms of each kind,
unknown names refused with the nearest known one, wrong kinds refused naming the parameter, and every
controlled-decoding option of docs/api.md."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2 as triton_service

from service.api.grpc.kserve import infer_request
from service.dataplane.calls import kserve_translation
from service.dataplane.parameters import Asked
from service.domain.errors import InvalidTensor
from service.domain.types import DecodeOptions
from tests.support.kserve import client_request


def _read(request: triton_service.ModelInferRequest) -> Asked:
    """What the KServe v2 data plane reads from a translation request's parameters."""
    return kserve_translation(infer_request(request))[1]


def _params(**values) -> triton_service.ModelInferRequest:
    """A tritonclient request of one text with these parameters, values typed like the client types them."""
    return client_request(["a"], parameters=values)


def test_parameters_accepted_forms() -> None:
    """int64, uint64 and decimal strings are read; Triton-reserved keys pass (its `timeout`, in
    microseconds, sets the deadline)."""
    assert _read(client_request(["a"])) == Asked(DecodeOptions())
    assert _read(_params(max_output_tokens=30, beam_size="  5 ")) == Asked(DecodeOptions(max_output_tokens=30,
                                                                                         beam_size=5))
    request = client_request(["a"], priority=3, timeout=1000, sequence_id=5, sequence_start=True,
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
    request = client_request(["a"])
    request.parameters["beam_size"].Clear()
    _refused(request, "parameter beam_size has no value")


def test_stream_flags() -> None:
    """`stream` and tritonclient's empty-final-response flag read as bool_param or "true" / "false"."""
    assert _read(_params(stream=True)) == Asked(DecodeOptions(), stream=True)
    assert _read(_params(stream=" FALSE ", beam_size=2)) == Asked(DecodeOptions(beam_size=2))
    request = client_request(["a"], parameters={"stream": "true"})
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    assert _read(request) == Asked(DecodeOptions(), stream=True, empty_final_response=True)
    for value, shown in ((1, "1"), ("yes", "'yes'"), (0.0, "0.0")):
        _refused(_params(stream=value), f"parameter stream {NOT_FLAG} {shown}")


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
    request = client_request(["a"])
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
