"""Hostile input at the api layer, property-based (hypothesis): the KServe v2 BYTES codec, request
decoding, and the options of both protocols (tests/support/properties.py: settings and limits)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from protos.inference import grpc_service_pb2 as v2
from protos.translator.v1 import translator_pb2 as pb
from service.api.grpc import translator
from service.api.grpc.kserve import parameters_of
from service.dataplane import parameters
from service.dataplane.kserve import deserialize_bytes, serialize_bytes
from service.domain.errors import InvalidInput, InvalidTensor
from tests.support import hostile
from tests.support.properties import FAST, MAX_BEAM, MAX_LEN


@FAST
@given(hostile.byte_tensors())
@example((b"", -1))
@example((serialize_bytes([b"a", b""]), 1))
@example((b"\x05\x00\x00\x00ab", 1))
def test_deserialize_bytes_parses_exactly_or_refuses(tensor: tuple[bytes, int]) -> None:
    """Exactly `count` elements that re-serialize to the input, or InvalidTensor with a clean message."""
    hostile.check_deserialize(*tensor)


@FAST
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_serialize_then_deserialize_round_trips(parts: list[bytes]) -> None:
    """serialize_bytes -> deserialize_bytes gives the elements back; any other count is refused."""
    raw = serialize_bytes(parts)
    assert len(raw) == 4 * len(parts) + sum(map(len, parts))
    assert deserialize_bytes(raw, len(parts)) == parts
    for wrong in (len(parts) - 1, len(parts) + 1):
        with pytest.raises(InvalidTensor, match="element|shape|holds|trailing"):
            deserialize_bytes(raw, wrong)


def test_negative_count_is_refused() -> None:
    """A negative element count is an error, even for empty contents (found by the property above)."""
    with pytest.raises(InvalidTensor, match="count must be >= 0, got -1"):
        deserialize_bytes(b"", -1)


@FAST
@given(hostile.infer_requests())
def test_decode_request_decodes_consistently_or_refuses(request_: v2.ModelInferRequest) -> None:
    """A decoded request matches its message; anything else is InvalidTensor / InvalidInput, clean."""
    hostile.check_decode(request_)


@pytest.mark.parametrize(("text", "expected"), [
    ("7" * 5000, "at most 20 digits"),
    ("0" * 5000 + "3", 3),
    (" 18446744073709551615 ", 18446744073709551615),
])
def test_long_decimal_string_parameter(text: str, expected: int | str) -> None:
    """A decimal string past Python's int conversion limit is InvalidTensor, not ValueError (found by
    the decode_request property); leading zeros do not count."""
    request = v2.ModelInferRequest()
    request.parameters["beam_size"].string_param = text
    if isinstance(expected, str):
        with pytest.raises(InvalidTensor, match=expected):
            parameters.read(parameters_of(request.parameters))
    else:
        assert parameters.read(parameters_of(request.parameters)).options.beam_size == expected


@FAST
@given(hostile.translate_options)
def test_native_options_resolve_within_limits_or_refuse(options: pb.TranslateOptions) -> None:
    """translator.v1 options: valid DecodeOptions (zero = default) within the limits, or InvalidInput."""
    try:
        resolved = translator.decode_options(options).resolved(MAX_LEN, MAX_BEAM)
    except InvalidInput as exc:
        hostile.check_message(str(exc))
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)
    assert resolved.beam_size == (options.beam_size or 1) and resolved.n_best == (options.n_best or 1)
    assert resolved.max_output_tokens == (options.max_output_tokens or MAX_LEN - 1)
    assert resolved.length_penalty == (options.length_penalty if options.HasField("length_penalty") else None)


@FAST
@given(hostile.parameters)
def test_v2_parameters_resolve_within_limits_or_refuse(chosen: dict) -> None:
    """v2 request parameters: valid DecodeOptions within the limits, or InvalidTensor / InvalidInput."""
    request = v2.ModelInferRequest()
    hostile._fill_parameters(request.parameters, chosen)
    try:
        decoded = parameters.read(parameters_of(request.parameters), stream=True).options
        resolved = decoded.resolved(MAX_LEN, MAX_BEAM)
    except (InvalidTensor, InvalidInput) as exc:
        hostile.check_message(str(exc))
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)
