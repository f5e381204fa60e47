"""T5's task prefixes on the wire: the tiny T5 of HF_MODELS, its bundle declaring config.json's tasks, served
with a repository. A request's `task` (translator.v1, KServe v2 gRPC, generate, Score) reads each text after
that task's prefix, as transformers' generate does for prefix + text; GetModelInfo and the Triton config list
the tasks; model.json's `task` sets a model's default; an unknown task is INVALID_ARGUMENT / 400 naming the
model's, and an unknown default refuses the load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
import tritonclient.grpc as triton

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.server import BackgroundServer
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import T5_TASKS, parallel
from tests.support.kserve import text_input, triton_client
from tests.support.repository import link_repository
from tests.support.server import server_config

pytestmark = pytest.mark.kernels

MAX_NEW = 12
PREFIXES = {name: task["prefix"] for name, task in T5_TASKS.items()}


@pytest.fixture(scope="module")
def served(tmp_path_factory, hf_bundles) -> Iterator[BackgroundServer]:
    """A repository of the tiny T5 bundle: `t5` as exported (no default task), `summ` with model.json's task
    "summarization", `bad` with an unknown default task; `t5` and `summ` loaded, gRPC and HTTP open."""
    bundle = hf_bundles["t5"]
    root = link_repository(tmp_path_factory.mktemp("tasks"), bundle, (("t5", 1), ("summ", 1), ("bad", 1)))
    (root / "summ" / "model.json").write_text(json.dumps({"task": "summarization"}))
    (root / "bad" / "model.json").write_text(json.dumps({"task": "translate_klingon"}))
    config = server_config(bundle, model_repository=root, model_control_mode="explicit",
                           load_model=("t5", "summ"), http_port=0)
    with BackgroundServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def expected(hf_dirs) -> dict[str, list[list[int]]]:
    """generate's greedy tokens of each text after each task's prefix (and after none: "none")."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(hf_dirs["t5"]).eval()
    tok = AutoTokenizer.from_pretrained(hf_dirs["t5"])
    texts = [s for s, _ in parallel(4, 41)]
    out = {task: [g[0].tokens for g in hf_generate(model, [tok(prefix + t)["input_ids"] for t in texts], 1,
                                                   MAX_NEW)]
           for task, prefix in {**PREFIXES, "none": ""}.items()}
    assert out["summarization"] != out["none"] != out["translation_en_to_de"]  # the prefix changes them
    return {"texts": texts, **out}


def translate(stub, model: str, texts: list[str], task: str = "") -> list[list[int]]:
    """translator.v1 Translate, greedy: each text's tokens."""
    options = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=1, task=task)
    answer = stub.Translate(pb.TranslateRequest(model=model, texts=texts, options=options), timeout=60)
    return [list(r.hypotheses[0].token_ids) for r in answer.results]


def test_each_protocol_reads_the_text_after_the_tasks_prefix(served, expected) -> None:
    texts = expected["texts"]
    with grpc.insecure_channel(served.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(model="t5"), timeout=60)
        assert list(info.tasks) == sorted(PREFIXES) and info.default_task == ""
        summ = stub.GetModelInfo(pb.GetModelInfoRequest(model="summ"), timeout=60)
        assert summ.default_task == "summarization" and list(summ.tasks) == sorted(PREFIXES)
        assert translate(stub, "t5", texts) == expected["none"]  # no default: the text as it is
        for task in PREFIXES:
            assert translate(stub, "t5", texts, task) == expected[task]
        assert translate(stub, "summ", texts) == expected["summarization"]  # model.json's default
        assert translate(stub, "summ", texts, "none") == expected["none"]
        assert translate(stub, "summ", texts, "translation_en_to_de") == expected["translation_en_to_de"]
        options = pb.TranslateOptions(max_output_tokens=MAX_NEW, beam_size=1, task="translation_en_to_de")
        answer = stub.Translate(pb.TranslateRequest(model="t5", texts=texts, options=options), timeout=60)
        de = [r.hypotheses[0].text for r in answer.results]
    with triton_client(served.address) as client:
        parameters = client.get_model_config("summ").config.parameters
        assert parameters["default_task"].string_value == "summarization"
        tasks = client.get_model_config("t5").config.parameters["tasks"].string_value
        assert tasks.split(",") == sorted(PREFIXES)
        answer = client.infer("t5", [text_input(texts)], parameters={"task": "translation_en_to_de",
                                                                     "max_output_tokens": MAX_NEW})
        assert [t.decode() for t in answer.as_numpy("TRANSLATION")] == de
    http = f"http://{served.http_address}"
    for text, want in zip(texts, expected["summarization"], strict=True):
        body = {"text_input": text, "parameters": {"task": "summarization", "max_output_tokens": MAX_NEW,
                                                   "return_tokens": True}}
        reply = requests.post(f"{http}/v2/models/t5/generate", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["hypotheses"][0]["token_ids"] == want


def test_score_reads_the_source_after_the_tasks_prefix(served, expected, hf_dirs) -> None:
    """Score with a task: the encoder reads the task's prefix ids, then the text's (as the transformers
    tokenizer gives prefix + text); the model's default task is scored so too, and "none" without them."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dirs["t5"])
    texts = expected["texts"]
    targets = [s for _, s in parallel(4, 41)]
    with grpc.insecure_channel(served.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)

        def score(model: str, task: str) -> list[pb.ScoreResult]:
            request = pb.ScoreRequest(model=model, sources=texts, targets=targets,
                                      options=pb.ScoreOptions(task=task, return_tokens=True))
            return list(stub.Score(request, timeout=60).results)

        named, default, bare = score("t5", "summarization"), score("summ", ""), score("summ", "none")
    prefix = PREFIXES["summarization"]
    for text, n, d, b in zip(texts, named, default, bare, strict=True):
        assert list(n.source_token_ids) == tok(prefix + text)["input_ids"] == list(d.source_token_ids)
        assert list(b.source_token_ids) == tok(text)["input_ids"]
        assert n.log_prob == d.log_prob
    assert [n.log_prob for n in named] != [b.log_prob for b in bare]


def test_an_unknown_task_is_refused_naming_the_models(served) -> None:
    with grpc.insecure_channel(served.address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        for model in ("t5", "summ"):
            with pytest.raises(grpc.RpcError) as error:
                translate(stub, model, ["a b"], "translate_klingon")
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "translate_klingon" in error.value.details() and "summarization" in error.value.details()
        with pytest.raises(grpc.RpcError) as error:
            stub.Score(pb.ScoreRequest(model="t5", sources=["a b"], targets=["a"],
                                       options=pb.ScoreOptions(task="x" * 500)), timeout=60)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and len(error.value.details()) < 500
    http = f"http://{served.http_address}"
    for task in ("translate_klingon", 7, ["summarization"]):
        body = {"text_input": "a b", "parameters": {"task": task}}
        reply = requests.post(f"{http}/v2/models/t5/generate", json=body, timeout=60)
        assert reply.status_code == 400 and "task" in reply.json()["error"], reply.text


def test_an_unknown_default_task_refuses_the_load_naming_the_bundles(served) -> None:
    with triton_client(served.address) as client:
        with pytest.raises(triton.InferenceServerException) as error:
            client.load_model("bad")
        message = error.value.message()
        assert "translate_klingon" in message and "summarization" in message
        (entry,) = [m for m in client.get_model_repository_index().models if m.name == "bad"]
        assert entry.state != "READY", entry


def test_a_bad_task_setting_is_refused_by_name(tmp_path: Path) -> None:
    from service.domain.errors import InvalidInput
    from service.models.layout import ModelSettings

    for value in ("", 3, "x" * 100, ["summarization"]):
        with pytest.raises(InvalidInput, match="model.json: task must be"):
            ModelSettings.from_json({"task": value}, "m/model.json")
    assert ModelSettings.from_json({"task": "summarization"}).task == "summarization"
