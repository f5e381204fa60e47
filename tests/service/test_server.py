"""The gRPC server in-process on 127.0.0.1 (port 0) with the tiny bundle: translator.v1, health,
reflection, metrics, batching modes and every error status."""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.config import ServerConfig
from service.domain.types import DEFAULT_MAX_BEAM, DecodeOptions
from service.ops import metrics
from service.server import BackgroundServer
from tests.support.decoding import assert_distinct, best_tokens, reference
from tests.support.metrics import key, scrape
from tests.support.polling import wait_until
from tests.support.server import (
    MAX_BATCH,
    MESSAGE_LIMIT,
    NOT_SERVING,
    SERVING,
    TEXTS,
    health_status,
    server_config,
)


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.TranslatorStub:
    """translator.v1 stub."""
    return pb_grpc.TranslatorStub(channel)


def test_translate_matches_runner_with_beams_scores_and_tokens(stub, runner):
    """Several texts, beam 3 / n-best 2: tokens, texts, scores and token strings equal runner.translate's."""
    options = pb.TranslateOptions(beam_size=3, n_best=2, length_penalty=0.6, return_scores=True,
                                  return_tokens=True, max_output_tokens=30)
    request = pb.TranslateRequest(texts=TEXTS[:3], options=options, request_id="rq-1")
    response = stub.Translate(request, timeout=30)
    assert response.request_id == "rq-1" and len(response.results) == 3
    expected = runner.translate(TEXTS[:3], DecodeOptions(beam_size=3, n_best=2, length_penalty=0.6,
                                                         max_output_tokens=30))
    for text, result, hyps in zip(TEXTS[:3], response.results, expected, strict=True):
        assert [list(h.token_ids) for h in result.hypotheses] == [h.tokens for h in hyps]
        assert [h.text for h in result.hypotheses] == [h.text for h in hyps]
        for got, want in zip(result.hypotheses, hyps, strict=True):
            assert got.score == pytest.approx(want.score, rel=1e-5)
            assert got.log_prob == pytest.approx(want.log_prob, rel=1e-5)
            length = len(want.tokens) + (want.finish_reason == "eos")  # eos counts
            assert got.score == pytest.approx(want.log_prob / ((5 + length) / 6) ** 0.6, rel=1e-5)
            assert list(got.tokens) == [runner.tokenizer.token(i) for i in want.tokens]
            assert pb.FinishReason.Name(got.finish_reason) == f"FINISH_REASON_{want.finish_reason.upper()}"
        assert list(result.source_token_ids) == runner.encode_texts([text])[0]
        assert result.timings.total_ms >= result.timings.compute_ms > 0
    generated = stub.Translate(pb.TranslateRequest(texts=["we 7 big."]), timeout=30).request_id
    assert len(generated) >= 16  # the server made one up


def test_alignment_shape_and_rows(stub, runner):
    """Alignment is (output tokens, source tokens incl. eos), rows sum to 1, equal to the runner's."""
    options = pb.TranslateOptions(return_alignment=True, max_output_tokens=20)
    (result,) = stub.Translate(pb.TranslateRequest(texts=[TEXTS[1]], options=options), timeout=30).results
    hyp = result.hypotheses[0]
    assert list(result.source_token_ids) == runner.encode_texts([TEXTS[1]])[0]
    weights = np.array([list(row.weights) for row in hyp.alignment])  # (T, S)
    assert weights.shape == (len(hyp.token_ids), len(result.source_token_ids))
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-4)
    want = runner.translate([TEXTS[1]], DecodeOptions(max_output_tokens=20,
                                                      return_alignment=True))[0][0].alignment
    np.testing.assert_allclose(weights, np.array(want), atol=1e-6)


def test_stream_pieces_then_one_final_result(stub, runner):
    """Greedy: indexed pieces then one final result that they add up to; beam: the final message alone."""
    request = pb.TranslateStreamRequest(text=TEXTS[0], options=pb.TranslateOptions(max_output_tokens=25),
                                        request_id="s-1")
    messages = list(stub.TranslateStream(request, timeout=30))
    pieces, final = messages[:-1], messages[-1]
    assert all(m.WhichOneof("event") == "piece" for m in pieces) and final.WhichOneof("event") == "result"
    assert {m.request_id for m in messages} == {"s-1"}
    hyp = final.result.hypotheses[0]
    assert [m.piece.index for m in pieces] == list(range(len(pieces)))
    assert [m.piece.token_id for m in pieces] == list(hyp.token_ids) == best_tokens(
        runner, TEXTS[0], DecodeOptions(max_output_tokens=25))
    assert "".join(m.piece.text for m in pieces) == hyp.text
    beam_options = pb.TranslateOptions(beam_size=2, max_output_tokens=25)
    beam = pb.TranslateStreamRequest(text=TEXTS[0], options=beam_options)
    (only,) = list(stub.TranslateStream(beam, timeout=30))  # beam search: the final message alone
    assert list(only.result.hypotheses[0].token_ids) == best_tokens(
        runner, TEXTS[0], DecodeOptions(beam_size=2, max_output_tokens=25))


def test_get_model_info(stub, runner, tiny_bundle):
    """Config, bundle file hashes (recomputed here), providers, limits, batching mode and defaults."""
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30)
    assert info.model_name == "translator"
    assert info.config.d_model == runner.config["d_model"] and info.config.max_len == runner.max_len
    assert info.config.n_encoder_layers == runner.config["n_encoder_layers"]
    assert info.bundle.version == runner.bundle.version and info.bundle.format_version == 1
    names = [f.name for f in info.bundle.files]
    assert names == sorted(names) and {"encoder.onnx", "decoder.onnx", "tokenizer.json"} <= set(names)
    for f in info.bundle.files:
        data = (tiny_bundle / f.name).read_bytes()
        assert (f.sha256, f.size_bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    assert list(info.execution_providers) == runner.providers == ["CPUExecutionProvider"]
    assert info.variant == "base"  # the tests' runner serves the fp32 files on the CPU
    assert (info.limits.max_batch_size, info.limits.max_source_tokens) == (MAX_BATCH, runner.max_len)
    assert info.limits.max_beam_size == runner.max_beam == DEFAULT_MAX_BEAM
    assert info.limits.max_output_tokens == runner.max_len - 1
    assert info.limits.batching_mode == pb.BATCHING_MODE_CONTINUOUS
    assert info.limits.max_batch_tokens == ServerConfig().max_batch_tokens  # the default budget
    assert (info.defaults.beam_size, info.defaults.max_output_tokens) == (1, runner.max_len - 1)


@pytest.mark.parametrize("mode", ["none", "dynamic", "continuous"])
def test_batching_modes_are_token_identical_under_concurrency(mode, tiny_bundle, runner):
    """10 concurrent calls of mixed length and beam give the tokens, log-probs and scores of each text
    decoded alone, in every mode."""
    jobs = [(TEXTS[i % 4], 1 + (i % 3 == 2), 12 + 3 * i) for i in range(10)]  # text, beam, max tokens
    want = [reference(runner, t, DecodeOptions(beam_size=b, max_output_tokens=m))[0] for t, b, m in jobs]
    assert_distinct([w.tokens for w in want])
    with BackgroundServer(server_config(tiny_bundle, batching=mode, max_batch_size=4), runner) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        translator = pb_grpc.TranslatorStub(ch)

        def call(job: tuple[str, int, int]) -> pb.Hypothesis:
            """One Translate call; the best hypothesis."""
            options = pb.TranslateOptions(beam_size=job[1], max_output_tokens=job[2], return_scores=True)
            return translator.Translate(pb.TranslateRequest(texts=[job[0]], options=options),
                                        timeout=60).results[0].hypotheses[0]

        with ThreadPoolExecutor(10) as pool:
            got = list(pool.map(call, jobs))
        limits = translator.GetModelInfo(pb.GetModelInfoRequest()).limits
        assert limits.batching_mode == pb.BatchingMode.Value(f"BATCHING_MODE_{mode.upper()}")
    assert [list(g.token_ids) for g in got] == [w.tokens for w in want]
    np.testing.assert_allclose([g.log_prob for g in got], [w.log_prob for w in want], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose([g.score for g in got], [w.score for w in want], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("texts", "options", "match"), [
    ([""], {}, "text 0 is empty"),
    (["ok", "   "], {}, "text 1 is empty"),
    (["apples " * 120], {}, "tokens long"),
    ([], {}, "at least one text"),
    (["we"] * (MAX_BATCH + 1), {}, f"at most {MAX_BATCH}"),
    (["we"], {"beam_size": 99}, f"beam_size must be between 1 and {DEFAULT_MAX_BEAM}"),
    (["we"], {"beam_size": 2, "n_best": 3}, "n_best must be between 1 and beam_size"),
    (["we"], {"max_output_tokens": 1000}, "max_output_tokens must be between 1 and 95"),
    (["we"], {"length_penalty": -1.0}, "length_penalty must be a finite number"),
    (["we"], {"length_penalty": math.nan}, "length_penalty must be a finite number"),
])
def test_invalid_requests(stub, texts, options, match):
    """Each bad request is INVALID_ARGUMENT with a message naming the problem."""
    with pytest.raises(grpc.RpcError) as err:
        stub.Translate(pb.TranslateRequest(texts=texts, options=pb.TranslateOptions(**options)), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert match in err.value.details()


def test_invalid_stream_request(stub):
    """TranslateStream validates like Translate."""
    with pytest.raises(grpc.RpcError) as err:
        list(stub.TranslateStream(pb.TranslateStreamRequest(text=" "), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "empty" in err.value.details()


def test_oversized_message_is_rejected_by_grpc(stub):
    """A request over --max-message-bytes is RESOURCE_EXHAUSTED (from gRPC); serving goes on."""
    with pytest.raises(grpc.RpcError) as err:
        stub.Translate(pb.TranslateRequest(texts=["a" * (MESSAGE_LIMIT + 10)]), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in err.value.details()
    assert stub.Translate(pb.TranslateRequest(texts=["we 7 big."]), timeout=30).results  # still serving


def test_health_follows_scheduler_health(server, channel):
    """Every service is SERVING; an unhealthy scheduler turns health and ServerReady off, then on again."""
    health = health_pb2_grpc.HealthStub(channel)
    services = ["", "translator.v1.Translator", "inference.GRPCInferenceService", "grpc.health.v1.Health"]
    assert [health.Check(health_pb2.HealthCheckRequest(service=s)).status for s in services] == [SERVING] * 4
    with pytest.raises(grpc.RpcError) as err:
        health.Check(health_pb2.HealthCheckRequest(service="no.Such"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    readiness = server.running.readiness
    kserve = v2_grpc.GRPCInferenceServiceStub(channel)

    readiness.scheduler_healthy = lambda: False
    try:
        wait_until(lambda: health_status(channel) == NOT_SERVING, "health NOT_SERVING")
        assert not kserve.ServerReady(v2.ServerReadyRequest()).ready
    finally:
        readiness.scheduler_healthy = lambda: server.running.scheduler.healthy
    wait_until(lambda: health_status(channel) == SERVING, "health SERVING again")
    assert kserve.ServerReady(v2.ServerReadyRequest()).ready


def test_reflection_lists_and_describes_every_service(channel):
    """The reflection stub lists all services and resolves their descriptors from one pool (ModelMesh's
    mmesh.ModelRuntime only under --modelmesh: tests/service/api/test_modelmesh.py)."""
    database = ProtoReflectionDescriptorDatabase(channel)
    assert set(database.get_services()) == {
        "translator.v1.Translator", "inference.GRPCInferenceService",
        "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
    }
    pool = descriptor_pool.DescriptorPool(database)
    translator = pool.FindServiceByName("translator.v1.Translator")
    results = translator.methods_by_name["Translate"].output_type.fields_by_name["results"]
    assert results.message_type.full_name == "translator.v1.TranslationResult"
    infer = pool.FindServiceByName("inference.GRPCInferenceService").methods_by_name["ModelInfer"]
    assert "raw_input_contents" in infer.input_type.fields_by_name
    config = pool.FindMessageTypeByName("inference.ModelConfig")  # a dependency file, fetched too
    assert config.fields_by_name["max_batch_size"].number == 4
    check = pool.FindServiceByName("grpc.health.v1.Health").methods_by_name["Check"]
    assert check.input_type.name == "HealthCheckRequest"


def test_metrics_endpoint_counts_requests(tiny_bundle, runner):
    """The /metrics histograms and counters grow by exactly the calls made, with their status codes."""
    with BackgroundServer(server_config(tiny_bundle, metrics_port=0), runner) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        translator = pb_grpc.TranslatorStub(ch)
        method = "translator.v1.Translator/Translate"
        before = scrape(srv.running.metrics_port)
        short = pb.TranslateOptions(max_output_tokens=5)
        for text in TEXTS[:3]:
            translator.Translate(pb.TranslateRequest(texts=[text], options=short))
        for _ in range(2):
            with pytest.raises(grpc.RpcError):
                translator.Translate(pb.TranslateRequest(texts=[""]))
        with pytest.raises(grpc.RpcError):  # the health servicer aborts by itself
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="no.Such"))
        with pytest.raises(grpc.RpcError):  # a domain error of the KServe v2 servicer
            v2_grpc.GRPCInferenceServiceStub(ch).ModelStatistics(v2.ModelStatisticsRequest(name="nope"))
        after = scrape(srv.running.metrics_port)

    def delta(name: str, **labels: str) -> float:
        """Increase of one sample between the two scrapes (request series: of gRPC, served by the one
        model unless other labels are given)."""
        if name.startswith("translator_request"):
            labels = {"protocol": "grpc", "model": "translator", "version": "1"} | labels
        return after.get(key(name, **labels), 0.0) - before.get(key(name, **labels), 0.0)

    assert delta("translator_request_latency_seconds_count", method=method) == 5
    assert delta("translator_request_latency_seconds_bucket", method=method, le="+Inf") == 5
    assert delta("translator_requests_total", method=method, code="OK") == 3
    assert delta("translator_requests_total", method=method, code="INVALID_ARGUMENT") == 2
    assert delta("translator_queue_time_seconds_count", model="translator", version="1") == 3  # per model
    assert delta("translator_requests_total", method="grpc.health.v1.Health/Check", code="NOT_FOUND",
                 model="", version="") == 1  # no model: model ""
    assert delta("translator_requests_total", method="inference.GRPCInferenceService/ModelStatistics",
                 code="NOT_FOUND", model=metrics.UNKNOWN_MODEL, version="") == 1  # never the name asked
    info = [k for k in after if k[0] == "translator_model_info" and ("model", "translator") in k[1]]
    assert info and {("batching", "continuous"), ("provider", "CPUExecutionProvider"),
                     ("variant", "base")} <= set(info[0][1])
