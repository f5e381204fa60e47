"""Score in KServe v2 form (service/dataplane/kserve.py): a TARGET input beside TEXT, read by Triton's
own clients over gRPC and HTTP (JSON and binary data) and as raw JSON, equal to the runner's Score, the end
token's BOOL output included (false for a translation cut at the model's maximum length); bad requests
refused saying what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.http as triton_http

from service.domain.types import ScoreOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.http import post_json, triton_http_client
from tests.support.kserve import text_input, triton_client
from tests.support.scoring import limit_and_ended_pairs
from tests.support.server import server_config


def target_input(texts: list[str]) -> triton.InferInput:
    """A TARGET BYTES input of these texts."""
    tensor = triton.InferInput("TARGET", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_))
    return tensor


@pytest.fixture(scope="module")
def both(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with its gRPC and HTTP ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def pairs(runner, texts) -> tuple[list[str], list[str]]:
    """Sources and targets of different lengths: greedy outputs and shortened ones."""
    sources = texts[:4]
    outputs = [h[0].text for h in runner.translate(sources)]
    return sources, [outputs[0], outputs[1], " ".join(outputs[2].split()[:1]) or "x", outputs[3]]


def test_triton_client_reads_the_runners_scores(both, runner, pairs):
    sources, targets = pairs
    want = runner.score(sources, targets, ScoreOptions())
    with triton_client(both.address) as client:
        result = client.infer("translator", [text_input(sources), target_input(targets)], request_id="s-1")
    assert result.get_response().id == "s-1"
    log_prob, score = result.as_numpy("LOG_PROB"), result.as_numpy("SCORE")
    token_log_probs, count = result.as_numpy("TOKEN_LOG_PROBS"), result.as_numpy("TOKEN_COUNT")
    assert log_prob.dtype == np.float32 and count.dtype == np.int32
    assert count.tolist() == [len(w.target_ids) for w in want] and len(set(count.tolist())) > 1
    assert token_log_probs.shape == (len(want), max(count))
    for i, w in enumerate(want):
        assert log_prob[i] == pytest.approx(w.log_prob, abs=1e-4)
        assert score[i] == pytest.approx(w.log_prob / len(w.target_ids), abs=1e-5)
        np.testing.assert_allclose(token_log_probs[i, : count[i]], w.log_probs, atol=1e-5)
        assert (token_log_probs[i, count[i]:] == 0).all()


def test_named_outputs_only_and_json_over_http(both, runner, pairs):
    sources, targets = pairs
    want = runner.score(sources[:2], targets[:2], ScoreOptions())
    with triton_client(both.address) as client:
        result = client.infer("translator", [text_input(sources[:2]), target_input(targets[:2])],
                              outputs=[triton.InferRequestedOutput("SCORE")])
    assert [o.name for o in result.get_response().outputs] == ["SCORE"]
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": sources[:2]},
                       {"name": "TARGET", "datatype": "BYTES", "shape": [2], "data": targets[:2]}]}
    status, _, raw = post_json(f"http://{both.http_address}/v2/models/translator/infer", body)
    assert status == 200, raw
    outputs = {o["name"]: o for o in json.loads(raw)["outputs"]}
    assert outputs["LOG_PROB"]["datatype"] == "FP32" and outputs["TOKEN_COUNT"]["data"] == [
        len(w.target_ids) for w in want]
    assert outputs["LOG_PROB"]["data"] == pytest.approx([w.log_prob for w in want], abs=1e-4)
    flat = outputs["TOKEN_LOG_PROBS"]["data"]
    width = outputs["TOKEN_LOG_PROBS"]["shape"][1]
    assert len(flat) == 2 * width
    assert flat[: len(want[0].log_probs)] == pytest.approx(want[0].log_probs, abs=1e-5)


def test_end_token_scored_is_a_bool_output_as_the_domain_says(both, runner, texts):
    sources, targets = limit_and_ended_pairs(runner, texts)
    want = runner.score(sources, targets)
    flags = [w.end_token_scored for w in want]
    assert flags == [False, True]  # the cut translation scored as it is, the finished one with eos
    with triton_client(both.address) as client:
        result = client.infer("translator", [text_input(sources), target_input(targets)])
    got = result.as_numpy("END_TOKEN_SCORED")
    assert got.dtype == np.bool_ and got.shape == (2,) and got.tolist() == flags
    finished = len(runner.encode_target(targets[1:])[0]) + 1  # its tokens and eos
    assert result.as_numpy("TOKEN_COUNT").tolist() == [runner.max_len - 1, finished]
    for binary in (False, True):  # tritonclient.http reads it from JSON data and from binary data
        tensors = []
        for name, items in (("TEXT", sources), ("TARGET", targets)):
            tensor = triton_http.InferInput(name, [2], "BYTES")
            tensor.set_data_from_numpy(np.array([t.encode() for t in items], dtype=np.object_),
                                       binary_data=binary)
            tensors.append(tensor)
        output = triton_http.InferRequestedOutput("END_TOKEN_SCORED", binary_data=binary)
        with triton_http_client(both.http_address) as client:
            answer = client.infer("translator", tensors, outputs=[output])
        read = answer.as_numpy("END_TOKEN_SCORED")
        assert read.dtype == np.bool_ and read.tolist() == flags, binary
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": sources},
                       {"name": "TARGET", "datatype": "BYTES", "shape": [2], "data": targets}]}
    status, _, raw = post_json(f"http://{both.http_address}/v2/models/translator/infer", body)
    assert status == 200, raw
    outputs = {o["name"]: o for o in json.loads(raw)["outputs"]}
    assert outputs["END_TOKEN_SCORED"] == {"name": "END_TOKEN_SCORED", "datatype": "BOOL", "shape": [2],
                                           "data": flags}
    assert all(type(x) is bool for x in outputs["END_TOKEN_SCORED"]["data"])  # JSON true / false


@pytest.mark.parametrize(("inputs", "parameters", "message"), [
    ([("TEXT", ["we 5", "we 6"]), ("TARGET", ["x"])], {}, "holds 1 texts for 2"),
    ([("TARGET", ["x"]), ("TEXT", ["we 5"])], {}, "expected exactly the inputs TEXT and TARGET"),
    ([("TEXT", ["we 5"]), ("TARGET", ["x"])], {"beam_size": 2}, "does not apply to scoring"),
    ([("TEXT", ["we 5"]), ("TARGET", ["x"])], {"target_language": "de"}, "target_language"),
    ([("TEXT", ["we 5"]), ("TARGET", ["x"])], {"target_languge": "de"},
     "unknown parameter 'target_languge'; did you mean target_language?"),
    ([("TEXT", ["we 5"]), ("TARGET", ["apples " * 120])], {}, "target 0 is"),
])
def test_bad_score_requests_are_invalid_argument(both, inputs, parameters, message):
    tensors = []
    for name, texts in inputs:
        tensor = triton.InferInput(name, [len(texts)], "BYTES")
        tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        tensors.append(tensor)
    with triton_client(both.address) as client, pytest.raises(triton.InferenceServerException) as err:
        client.infer("translator", tensors, parameters=parameters)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and message in err.value.message()
