"""The int8 variant served on the CPU: chosen by bundle.json's provider_variants or by --variant, reported
by GetModelInfo, the KServe model config and the metrics, and decoding what the int8 graphs decode."""

from __future__ import annotations

import grpc
import pytest

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.errors import BundleError
from service.domain.types import DecodeOptions
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.metrics import scrape
from tests.support.server import TEXTS, server_config

CPU = "CPUExecutionProvider"
MAX_TOKENS = 20


def tokens(runner: Runner, texts: list[str]) -> list[list[int]]:
    """Greedy tokens of each text, decoded alone."""
    return [runner.translate([t], DecodeOptions(max_output_tokens=MAX_TOKENS))[0][0].tokens for t in texts]


def test_provider_variants_choose_int8_on_the_cpu_and_variant_overrides(tiny_int8_bundle, tiny_bundle):
    bundle = load_bundle(tiny_int8_bundle)
    assert bundle.provider_variants == {"CUDAExecutionProvider": "fp16", CPU: "int8"}
    runner = Runner(tiny_int8_bundle, providers=[CPU])
    assert runner.variant_name == "int8"
    assert {g: p.name for g, p in runner.sessions.files.items()} == {
        "encoder": "encoder.int8.onnx", "decoder": "decoder.int8.onnx"}
    base = Runner(tiny_int8_bundle, providers=[CPU], variant="base")
    assert base.variant_name == "base" and base.sessions.files["decoder"].name == "decoder.onnx"
    with pytest.raises(BundleError, match="no variant 'int8'"):
        Runner(tiny_bundle, providers=[CPU], variant="int8")


@pytest.mark.parametrize(("variant", "reported"), [("", "int8"), ("int8", "int8"), ("base", "base")])
def test_the_server_serves_and_reports_the_variant(tiny_int8_bundle, variant, reported):
    """No --variant: the bundle's CPU default (int8); --variant picks either. Tokens are those of a runner
    of the same files."""
    reference = Runner(tiny_int8_bundle, providers=[CPU], variant=reported)
    config = server_config(tiny_int8_bundle, variant=variant, metrics_port=0)
    with BackgroundServer(config) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30).variant == reported
        config_reply = v2_grpc.GRPCInferenceServiceStub(channel).ModelConfig(
            v2.ModelConfigRequest(name="translator"), timeout=30)
        assert config_reply.config.parameters["variant"].string_value == reported
        options = pb.TranslateOptions(max_output_tokens=MAX_TOKENS)
        got = [list(stub.Translate(pb.TranslateRequest(texts=[t], options=options), timeout=30)
                    .results[0].hypotheses[0].token_ids) for t in TEXTS]
        metrics = scrape(srv.running.metrics_port)
    info = [labels for (name, labels) in metrics  # this server's model (other tests' may share the registry)
            if name == "translator_model_info" and ("model", "translator") in labels]
    assert got == tokens(reference, TEXTS)
    assert info and ("variant", reported) in info[0]
