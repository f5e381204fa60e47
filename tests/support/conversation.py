"""A recorded conversation with the server: one request of every protocol and method (answers and errors),
replayed against a server of the default bundle and compared with what was recorded (the answers as plain
data and their comparison: tests/support/answers.py).

Record (from the repository root): `python -m tests.support.conversation RECORD.json`.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.modelmesh import model_runtime_pb2 as mm
from protos.modelmesh import model_runtime_pb2_grpc as mm_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from tests.support import REPO_ROOT
from tests.support.answers import grpc_answer, http_answer, normalised

RECORD = REPO_ROOT / "tests" / "service" / "api" / "conversation.json"
BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
MODEL, SPARE = "normalizer", "spare"
TEXT, TEXTS = "the 4217 cat.", ["Anna saw 3 red apples on day 12.", "we 7 big."]


def repository(root: Path) -> Path:
    """root/normalizer/1 and root/spare/1, both links to the default bundle."""
    for name in (MODEL, SPARE):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "1").symlink_to(BUNDLE, target_is_directory=True)
    return root


# ----- the exchanges --------------------------------------------------------------------------------
def _infer(texts: list[str], model: str = MODEL, **parameters: Any) -> v2.ModelInferRequest:
    """A ModelInferRequest of TEXT with these parameters (typed by their Python type)."""
    request = v2.ModelInferRequest(model_name=model, id="req-1")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    for key, value in parameters.items():
        entry = request.parameters[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.int64_param = value
        elif isinstance(value, float):
            entry.double_param = value
        else:
            entry.string_param = value
    return request


def _score_infer(sources: list[str], targets: list[str]) -> v2.ModelInferRequest:
    """A ModelInferRequest scoring TARGET given TEXT."""
    request = _infer(sources)
    tensor = request.inputs.add(name="TARGET", datatype="BYTES", shape=[len(targets)])
    tensor.contents.bytes_contents.extend(t.encode() for t in targets)
    return request


def _binary_infer_body(texts: list[str]) -> tuple[bytes, dict[str, str]]:
    """Triton's binary tensor data form of a TEXT infer request, asking binary outputs."""
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    header = json.dumps({"inputs": [{"name": "TEXT", "shape": [len(texts)], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header)),
                          "Content-Type": "application/octet-stream"}


def grpc_exchanges(channel: grpc.Channel) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """(name, play) of every gRPC exchange, in order."""
    tr, ks, mesh = pb_grpc.TranslatorStub(channel), v2_grpc.GRPCInferenceServiceStub(channel), \
        mm_grpc.ModelRuntimeStub(channel)
    full = pb.TranslateOptions(beam_size=2, n_best=2, return_tokens=True, return_scores=True,
                               return_alignment=True)
    controls = pb.TranslateOptions(target_prefix="the", min_output_tokens=3, repetition_penalty=1.2,
                                   no_repeat_ngram_size=3, suppress_sequences=["four"])
    score_options = pb.ScoreOptions(return_tokens=True, return_alignment=True)
    score_targets = ["anna saw three red apples on day twelve.", "we seven big."]

    def unary(method: Callable[..., Any], request: Message) -> Callable[[], dict[str, Any]]:
        return lambda: grpc_answer(lambda: method(request, timeout=120))

    def streamed(method: Callable[..., Any], request: Message) -> Callable[[], dict[str, Any]]:
        return lambda: grpc_answer(lambda: method(request, timeout=60), stream=True)

    def stream_infer(request: v2.ModelInferRequest) -> Callable[[], dict[str, Any]]:
        return lambda: grpc_answer(lambda: ks.ModelStreamInfer(iter([request]), timeout=60), stream=True)

    def translate(texts: list[str], model: str = MODEL, **options: Any) -> pb.TranslateRequest:
        return pb.TranslateRequest(model=model, texts=texts, options=pb.TranslateOptions(**options))

    def load(name: str, **parameters: str) -> v2.RepositoryModelLoadRequest:
        return v2.RepositoryModelLoadRequest(model_name=name, parameters={
            k: v2.ModelRepositoryParameter(string_param=v) for k, v in parameters.items()})

    bad_tensor = v2.ModelInferRequest(model_name=MODEL, inputs=[
        v2.ModelInferRequest.InferInputTensor(name="TEXT", datatype="FP32", shape=[1])])
    return [
        ("translator.Translate full", unary(tr.Translate, pb.TranslateRequest(
            model=MODEL, texts=TEXTS, options=full, request_id="r-1"))),
        ("translator.Translate default", unary(tr.Translate, translate([TEXT]))),
        ("translator.Translate controls", unary(tr.Translate, pb.TranslateRequest(
            model=MODEL, texts=[TEXT], options=controls))),
        ("translator.Translate sampling", unary(tr.Translate, translate([TEXT], temperature=0.5, top_k=3,
                                                                        seed=7))),
        ("translator.Translate no model", unary(tr.Translate, translate([TEXT], model=""))),
        ("translator.Translate unknown model", unary(tr.Translate, translate([TEXT], model="nope"))),
        ("translator.Translate no texts", unary(tr.Translate, translate([]))),
        ("translator.Translate beam too wide", unary(tr.Translate, translate([TEXT], beam_size=1000))),
        ("translator.Translate output too long", unary(tr.Translate, translate([TEXT],
                                                                               max_output_tokens=100000))),
        ("translator.Translate prefix twice", unary(tr.Translate, translate([TEXT], target_prefix="a",
                                                                            target_prefix_ids=[5]))),
        ("translator.TranslateStream greedy", streamed(tr.TranslateStream, pb.TranslateStreamRequest(
            model=MODEL, text=TEXT, request_id="s-1", options=pb.TranslateOptions(return_tokens=True)))),
        ("translator.TranslateStream beam", streamed(tr.TranslateStream, pb.TranslateStreamRequest(
            model=MODEL, text=TEXT, request_id="s-2", options=pb.TranslateOptions(beam_size=3)))),
        ("translator.Score", unary(tr.Score, pb.ScoreRequest(
            model=MODEL, sources=TEXTS, targets=score_targets, options=score_options, request_id="c-1"))),
        ("translator.Score mismatched", unary(tr.Score, pb.ScoreRequest(model=MODEL, sources=TEXTS,
                                                                         targets=["x"]))),
        ("translator.Score none", unary(tr.Score, pb.ScoreRequest(model=MODEL))),
        ("translator.GetModelInfo", unary(tr.GetModelInfo, pb.GetModelInfoRequest(model=MODEL))),
        ("kserve.ServerLive", unary(ks.ServerLive, v2.ServerLiveRequest())),
        ("kserve.ServerReady", unary(ks.ServerReady, v2.ServerReadyRequest())),
        ("kserve.ServerMetadata", unary(ks.ServerMetadata, v2.ServerMetadataRequest())),
        ("kserve.ModelReady", unary(ks.ModelReady, v2.ModelReadyRequest(name=MODEL))),
        ("kserve.ModelReady spare", unary(ks.ModelReady, v2.ModelReadyRequest(name=SPARE))),
        ("kserve.ModelReady unknown", unary(ks.ModelReady, v2.ModelReadyRequest(name="nope"))),
        ("kserve.ModelMetadata", unary(ks.ModelMetadata, v2.ModelMetadataRequest(name=MODEL))),
        ("kserve.ModelConfig", unary(ks.ModelConfig, v2.ModelConfigRequest(name=MODEL))),
        ("kserve.ModelInfer", unary(ks.ModelInfer, _infer(TEXTS, max_tokens=40, beam_size=2))),
        ("kserve.ModelInfer controls", unary(ks.ModelInfer, _infer(
            [TEXT], min_tokens=3, repetition_penalty=1.2, target_prefix="the", suppress_sequences='["four"]',
            temperature=0.5, top_k=3, seed=7))),
        ("kserve.ModelInfer misspelt option", unary(ks.ModelInfer, _infer([TEXT], bem_size=4))),
        ("kserve.ModelInfer wrong kind", unary(ks.ModelInfer, _infer([TEXT], beam_size="wide"))),
        ("kserve.ModelInfer stream unary", unary(ks.ModelInfer, _infer([TEXT], stream=True))),
        ("kserve.ModelInfer n_best", unary(ks.ModelInfer, _infer([TEXT], n_best=2))),
        ("kserve.ModelInfer bad datatype", unary(ks.ModelInfer, bad_tensor)),
        ("kserve.ModelInfer score", unary(ks.ModelInfer, _score_infer(TEXTS, score_targets))),
        ("kserve.ModelStreamInfer stream", stream_infer(_infer([TEXT], stream=True))),
        ("kserve.ModelStreamInfer whole", stream_infer(_infer([TEXT]))),
        ("kserve.ModelStreamInfer error", stream_infer(_infer([TEXT], beam_size=0))),
        ("kserve.ModelStatistics", unary(ks.ModelStatistics, v2.ModelStatisticsRequest(name=MODEL))),
        ("kserve.RepositoryIndex", unary(ks.RepositoryIndex, v2.RepositoryIndexRequest())),
        ("kserve.RepositoryModelLoad bad parameter", unary(ks.RepositoryModelLoad, load(SPARE, cfg="{}"))),
        ("kserve.RepositoryModelLoad", unary(ks.RepositoryModelLoad, load(SPARE,
                                                                          config='{"max_batch_size": 4}'))),
        ("kserve.RepositoryIndex ready", unary(ks.RepositoryIndex, v2.RepositoryIndexRequest(ready=True))),
        ("kserve.RepositoryModelUnload", unary(ks.RepositoryModelUnload,
                                               v2.RepositoryModelUnloadRequest(model_name=SPARE))),
        ("kserve.RepositoryModelUnload unknown", unary(ks.RepositoryModelUnload,
                                                       v2.RepositoryModelUnloadRequest(model_name="nope"))),
        ("modelmesh.runtimeStatus", unary(mesh.runtimeStatus, mm.RuntimeStatusRequest())),
        ("modelmesh.predictModelSize", unary(mesh.predictModelSize,
                                             mm.PredictModelSizeRequest(modelId="m-1", modelPath=SPARE))),
        ("modelmesh.loadModel", unary(mesh.loadModel, mm.LoadModelRequest(modelId="m-1", modelPath=SPARE))),
        ("modelmesh Translate by id", unary(tr.Translate, pb.TranslateRequest(model="m-1", texts=[TEXT],
                                                                              request_id="r-2"))),
        ("modelmesh ModelInfer by id", unary(ks.ModelInfer, _infer([TEXT], model="m-1"))),
        ("modelmesh.modelSize", unary(mesh.modelSize, mm.ModelSizeRequest(modelId="m-1"))),
        ("modelmesh.unloadModel", unary(mesh.unloadModel, mm.UnloadModelRequest(modelId="m-1"))),
        ("modelmesh.loadModel outside", unary(mesh.loadModel, mm.LoadModelRequest(modelId="m-2",
                                                                                  modelPath="/etc"))),
    ]


def http_exchanges(address: str) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """(name, play) of every HTTP exchange, in order."""
    m = f"/v2/models/{MODEL}"
    binary, binary_headers = _binary_infer_body(TEXTS)
    infer = {"id": "h-1", "inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": TEXTS}],
             "parameters": {"max_tokens": 40}}
    score_body = {"sources": TEXTS, "targets": ["anna saw three red apples on day twelve.", "we seven big."],
                  "parameters": {"return_tokens": True, "return_alignment": True}}

    def call(method: str, path: str, body: Any = None, **kwargs: Any) -> Callable[[], dict[str, Any]]:
        return lambda: http_answer(address, method, path, body, **kwargs)

    def post(path: str, body: Any = None, **kwargs: Any) -> Callable[[], dict[str, Any]]:
        return lambda: http_answer(address, "POST", path, body, **kwargs)

    return [
        ("http GET /v2", call("GET", "/v2")),
        ("http live", call("GET", "/v2/health/live")),
        ("http ready", call("GET", "/v2/health/ready")),
        ("http model metadata", call("GET", m)),
        ("http model metadata version", call("GET", m + "/versions/1")),
        ("http model ready", call("GET", m + "/ready")),
        ("http model ready unknown", call("GET", "/v2/models/nope/ready")),
        ("http model config", call("GET", m + "/config")),
        ("http infer json", post(m + "/infer", infer)),
        ("http infer binary", post(m + "/infer", raw=binary, headers=binary_headers)),
        ("http infer wrong input", post(m + "/infer", {"inputs": [
            {"name": "SOURCE", "shape": [1], "datatype": "BYTES", "data": [TEXT]}]})),
        ("http infer score", post(m + "/infer", {"inputs": [
            {"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [TEXTS[1]]},
            {"name": "TARGET", "shape": [1], "datatype": "BYTES", "data": ["we seven big."]}]})),
        ("http generate", post(m + "/generate", {"text_input": TEXT, "parameters": {"max_tokens": 40}})),
        ("http generate extras", post(m + "/generate", {
            "text_input": TEXT, "n_best": 2, "beam_size": 2, "return_scores": True, "return_tokens": True,
            "return_alignment": True})),
        ("http generate controls", post(m + "/generate", {"text_input": TEXT, "parameters": {
            "target_prefix": "the", "suppress_sequences": ["four"], "min_output_tokens": 3}})),
        ("http generate misspelt", post(m + "/generate", {"text_input": TEXT,
                                                                  "parameters": {"min_length": 30}})),
        ("http generate no text", post(m + "/generate", {"parameters": {}})),
        ("http generate bad timeout", post(m + "/generate", {"text_input": TEXT, "timeout": -1})),
        ("http generate_stream", post(m + "/generate_stream", {"text_input": TEXT})),
        ("http generate_stream beam", post(m + "/generate_stream", {"text_input": TEXT, "beam_size": 3})),
        ("http generate_stream extras", post(m + "/generate_stream", {"text_input": TEXT, "n_best": 2})),
        ("http score", post(m + "/score", score_body)),
        ("http score one", post(m + "/versions/1/score", {"source": TEXTS[1], "target": "we seven big."})),
        ("http score mismatched", post(m + "/score", {"sources": TEXTS, "targets": ["x"]})),
        ("http score unknown model", post("/v2/models/nope/score", {"source": "a", "target": "b"})),
        ("http stats", call("GET", m + "/stats")),
        ("http repository index", post("/v2/repository/index", {})),
        ("http repository load", post(f"/v2/repository/models/{SPARE}/load", {})),
        ("http repository unload", post(f"/v2/repository/models/{SPARE}/unload", {})),
        ("http repository load bad", post(f"/v2/repository/models/{SPARE}/load",
                                          {"parameters": {"config": 3.5}})),
        ("http not json", post(m + "/infer", raw=b"{nope", headers={"Content-Type": "application/json"})),
        ("http no route", call("GET", "/v3/elsewhere")),
        ("http wrong method", call("DELETE", m + "/infer")),
    ]


def converse(grpc_address: str, http_address: str) -> list[dict[str, Any]]:
    """Play every exchange in order: [{"name", "answer"}], answers normalised."""
    with grpc.insecure_channel(grpc_address) as channel:
        plays = grpc_exchanges(channel) + http_exchanges(http_address)
        return [{"name": name, "answer": normalised(play())} for name, play in plays]


def server_config(root: Path):
    """The server the conversation is recorded and replayed with: a two-model repository of the default
    bundle under `root`, --modelmesh (the conversation has ModelMesh's calls too), no sentence cache (every
    text it sends decoded, repeats too)."""
    from service.config import ServerConfig

    return ServerConfig(bundle=BUNDLE, model_repository=repository(root), model_control_mode="explicit",
                        load_model=(MODEL,), port=0, http_port=0, metrics_port=-1,
                        providers=("CPUExecutionProvider",), max_batch_size=8, modelmesh=True,
                        sentence_cache_bytes=0)


def main(argv: list[str]) -> int:
    """Record the conversation with a fresh server of the default bundle into argv[0]."""
    from service.server import BackgroundServer

    with tempfile.TemporaryDirectory() as tmp, BackgroundServer(server_config(Path(tmp))) as server:
        record = converse(server.address, server.http_address)
    Path(argv[0]).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(record)} exchanges recorded in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
