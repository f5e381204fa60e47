"""A real server (in process, tiny bundle, 64 KiB message limit) answering arbitrary v2 and native
requests, property-based (hypothesis): a result per text, or an allowed status with a clean message;
the server stays SERVING. Hostile input at each layer below the server: api/test_hostile_input.py,
domain/test_decode_options.py; settings: tests/support/properties.py."""

from __future__ import annotations

from collections import Counter

import grpc
from hypothesis import given, settings
from hypothesis import strategies as st

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.dataplane.kserve import deserialize_bytes
from tests.support import hostile
from tests.support.properties import END_TO_END
from tests.support.server import SERVING, health_status

SERVED = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
TIMEOUT_S = 60


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
    assert health_status(channel) == SERVING


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
    assert health_status(channel) == SERVING


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
    assert health_status(channel) == SERVING
