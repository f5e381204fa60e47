"""Property-based tests (hypothesis) of hostile input: the BYTES codec, request decoding, option
validation, and a real server answering arbitrary v2 and native requests with clean statuses.

Strategies and oracles are in bench/hostile.py (shared with the fuzz driver bench/fuzz.py); every
run draws the same examples (derandomize), so a failure here reproduces in CI.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench import hostile
from bench.clean_messages import internals_in
from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api import kserve, translator
from service.api.kserve_codec import deserialize_bytes, parse_parameters, serialize_bytes
from service.domain.errors import InvalidInput, InvalidTensor
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.server import server_config

MAX_LEN, MAX_BEAM = 96, 8  # the tiny bundle's (tests/conftest.py) and the servers' of these tests
SERVED = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
END_TO_END = settings(FAST, max_examples=150)
TIMEOUT_S = 60


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
            parse_parameters(request.parameters)
    else:
        assert parse_parameters(request.parameters).beam_size == expected


@FAST
@given(hostile.translate_options)
def test_native_options_resolve_within_limits_or_refuse(options: pb.TranslateOptions) -> None:
    """translator.v1 options: valid DecodeOptions (zero = default) within the limits, or InvalidInput."""
    try:
        resolved = translator.decode_options(options, MAX_LEN).resolved(MAX_LEN, MAX_BEAM)
    except InvalidInput as exc:
        hostile.check_message(str(exc))
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)
    assert resolved.beam_size == (options.beam_size or 1) and resolved.n_best == (options.n_best or 1)
    assert resolved.max_new_tokens == (options.max_output_tokens or MAX_LEN - 1)
    assert resolved.alpha == (options.length_penalty if options.HasField("length_penalty") else 0.0)


@FAST
@given(hostile.parameters)
def test_v2_parameters_resolve_within_limits_or_refuse(chosen: dict) -> None:
    """v2 request parameters: valid DecodeOptions within the limits, or InvalidTensor / InvalidInput."""
    request = v2.ModelInferRequest()
    hostile._fill_parameters(request.parameters, chosen)
    try:
        decoded = kserve.decode_options(parse_parameters(request.parameters), MAX_LEN)
        resolved = decoded.resolved(MAX_LEN, MAX_BEAM)
    except (InvalidTensor, InvalidInput) as exc:
        hostile.check_message(str(exc))
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)


numbers = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none(),
                    st.sampled_from([10**400, -(10**400), 10**5000, math.nan, math.inf]))


@FAST
@given(beam_size=st.one_of(st.integers(1, MAX_BEAM), numbers), n_best=st.one_of(st.integers(1, 3), numbers),
       alpha=st.one_of(st.floats(0, 2), numbers), max_new_tokens=st.one_of(st.integers(1, MAX_LEN), numbers))
def test_decode_options_resolve_within_limits_or_refuse(beam_size, n_best, alpha, max_new_tokens) -> None:
    """DecodeOptions.resolved on any numbers (NaN, inf, negative, huge, bool, None): within the limits
    and equal to what was asked, or InvalidInput naming the option."""
    asked = DecodeOptions(beam_size=beam_size, n_best=n_best, alpha=alpha, max_new_tokens=max_new_tokens)
    try:
        resolved = asked.resolved(MAX_LEN, MAX_BEAM)
    except InvalidInput as exc:
        hostile.check_message(str(exc))
        assert any(name in str(exc) for name in ("beam_size", "n_best", "alpha", "max_new_tokens"))
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)
    assert (resolved.beam_size, resolved.n_best, resolved.alpha) == (beam_size, n_best, float(alpha))
    assert resolved.max_new_tokens == (MAX_LEN - 1 if max_new_tokens is None else max_new_tokens)


def test_clean_message_check_can_fail() -> None:
    """The message check flags tracebacks, paths and class names, and passes the server's own words."""
    for leaky in ["Traceback (most recent call last)", 'File "/srv/app/codec.py", line 3', "KeyError: 'x'",
                  "InvalidTensor: bad", "raised QueueFull", "at 0x7f3a2b1c9d80"]:
        assert internals_in(leaky), leaky
    assert internals_in("text 0 is empty") is None
    assert internals_in("parameter beam_size must be >= 1, got 0") is None


@pytest.fixture(scope="module")
def channel(tiny_bundle: Path, runner: Runner) -> Iterator[grpc.Channel]:
    """A channel to a continuous-batching server on 127.0.0.1 (64 KiB message limit)."""
    with BackgroundServer(server_config(tiny_bundle), runner) as server, \
            grpc.insecure_channel(server.address) as ch:
        yield ch


def assert_serving(channel: grpc.Channel) -> None:
    """The server's overall health is SERVING."""
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def assert_both_paths(counts: Counter[str], ok: str = "OK") -> None:
    """At least a fifth of the calls were served and a fifth refused: the strategies reach both paths."""
    total = sum(counts.values())
    assert counts[ok] >= total / 5 and total - counts[ok] >= total / 5, dict(counts)


def test_server_answers_arbitrary_v2_requests_cleanly(channel: grpc.Channel) -> None:
    """ModelInfer of arbitrary requests: OK with one translation per text, or an allowed status with a
    clean message; the server stays SERVING."""
    stub = v2_grpc.GRPCInferenceServiceStub(channel)
    codes: Counter[str] = Counter()

    @END_TO_END
    @given(hostile.infer_requests())
    def call(request: v2.ModelInferRequest) -> None:
        """One request."""
        try:
            response = stub.ModelInfer(request, timeout=TIMEOUT_S)
        except grpc.RpcError as err:
            codes[err.code().name] += 1
            hostile.check_status(err.code().name, err.details() or "", SERVED)
            return
        codes["OK"] += 1
        decoded = hostile.check_decode(request)
        assert decoded is not None, "the server accepted a request the codec refuses"
        assert [o.name for o in response.outputs] == ["TRANSLATION"]
        assert list(response.outputs[0].shape) == [len(decoded.texts)]
        deserialize_bytes(response.raw_output_contents[0], len(decoded.texts))  # one translation per text

    call()
    assert_both_paths(codes)
    assert_serving(channel)


def test_server_answers_arbitrary_native_requests_cleanly(channel: grpc.Channel) -> None:
    """Translate and TranslateStream of arbitrary texts and options: OK with a result per text, or an
    allowed status with a clean message; the server stays SERVING."""
    stub = pb_grpc.TranslatorStub(channel)
    codes: Counter[str] = Counter()

    @END_TO_END
    @given(st.one_of(hostile.translate_requests, hostile.stream_requests))
    def call(request: pb.TranslateRequest | pb.TranslateStreamRequest) -> None:
        """One unary or streaming call."""
        try:
            if isinstance(request, pb.TranslateRequest):
                results = list(stub.Translate(request, timeout=TIMEOUT_S).results)
                assert len(results) == len(request.texts)
            else:
                results = [m.result for m in stub.TranslateStream(request, timeout=TIMEOUT_S)
                           if m.HasField("result")]
                assert len(results) == 1
        except grpc.RpcError as err:
            codes[err.code().name] += 1
            hostile.check_status(err.code().name, err.details() or "", SERVED)
            return
        codes["OK"] += 1
        n_best = request.options.n_best or 1
        assert all(1 <= len(r.hypotheses) <= n_best for r in results)

    call()
    assert_both_paths(codes)
    assert_serving(channel)


def test_server_answers_arbitrary_v2_streams_cleanly(channel: grpc.Channel) -> None:
    """ModelStreamInfer of up to three arbitrary requests: one final answer or one clean error per
    request, and the stream itself ends OK."""
    stub = v2_grpc.GRPCInferenceServiceStub(channel)
    answers: Counter[str] = Counter()

    @settings(END_TO_END, max_examples=60)
    @given(st.lists(hostile.infer_requests(), min_size=1, max_size=3))
    def call(requests: list[v2.ModelInferRequest]) -> None:
        """One stream."""
        for i, request in enumerate(requests):
            request.id = f"r{i}"
        finals = dict.fromkeys((r.id for r in requests), 0)
        for message in stub.ModelStreamInfer(iter(requests), timeout=TIMEOUT_S):
            rid = message.infer_response.id
            if message.error_message:
                prefix = f"[request id: {rid}] "
                assert message.error_message.startswith(prefix)
                hostile.check_message(message.error_message[len(prefix):])
                finals[rid] += 1
                answers["error"] += 1
            elif message.infer_response.parameters["triton_final_response"].bool_param:
                finals[rid] += 1
                answers["final"] += 1
        assert list(finals.values()) == [1] * len(requests)

    call()
    assert_both_paths(answers, ok="final")
    assert_serving(channel)
