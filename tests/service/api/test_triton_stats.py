"""ModelConfig and ModelStatistics through Triton's own `tritonclient.grpc` against real servers on
127.0.0.1: the configuration reflects each batching mode's real settings, and the statistics
count requests, texts and executions as Triton defines them, consistently with the Prometheus
metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.grpc import model_config_pb2 as triton_config

from service.config import ServerConfig
from service.ops import metrics
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.kserve import text_input, triton_client
from tests.support.server import MAX_BATCH, TEXTS, server_config

INFER_METHOD = "inference.GRPCInferenceService/ModelInfer"
DYNAMIC_DELAY_MS = 2000.0  # long enough for 4 concurrent requests to fill a dynamic batch of 4 rows


@pytest.fixture(scope="module")
def small_queue_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A continuous-batching server of the tiny bundle with a queue of 40 texts."""
    with BackgroundServer(server_config(tiny_bundle, queue_size=40), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(small_queue_server: BackgroundServer) -> Iterator[triton.InferenceServerClient]:
    """Triton's client of `small_queue_server`, unchanged."""
    with triton_client(small_queue_server.address) as c:
        yield c


def stats(client: triton.InferenceServerClient):
    """The ModelStatistics message of `translator`."""
    response = client.get_inference_statistics("translator")
    assert [(s.name, s.version) for s in response.model_stats] == [("translator", "1")]
    return response.model_stats[0]


def prometheus() -> dict[str, float]:
    """The Prometheus figures the statistics must agree with."""
    return {
        "queue_sum": metrics.histogram_sum(metrics.QUEUE_TIME),
        "encoder_sum": metrics.histogram_sum(metrics.ENCODER_COMPUTE),
        "encoder_count": metrics.histogram_count(metrics.ENCODER_COMPUTE),
        "decoder_sum": metrics.histogram_sum(metrics.DECODER_STEP),
        "latency_sum": metrics.histogram_sum(metrics.REQUEST_LATENCY, method=INFER_METHOD),
    }


def batch_counts(model_stats) -> dict[int, tuple[int, int]]:
    """Execution size -> (executions, encoder ns)."""
    return {b.batch_size: (b.compute_infer.count, b.compute_infer.ns) for b in model_stats.batch_stats}


def delta(after: dict, before: dict) -> dict:
    """after - before, key by key (missing = 0)."""
    return {k: tuple(a - b for a, b in zip(v, before.get(k, (0,) * len(v)), strict=True))
            for k, v in after.items() if v != before.get(k)}


def test_model_config_of_continuous_server(client, runner):
    """Name, platform, tensors as TYPE_STRING [-1], and the continuous scheduler's real settings."""
    config = client.get_model_config("translator").config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        "translator", "onnxruntime_onnx", "onnxruntime", 0)
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("TEXT", triton_config.TYPE_STRING, [-1])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("TRANSLATION", triton_config.TYPE_STRING, [-1])]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    batching = config.dynamic_batching
    assert list(batching.preferred_batch_size) == [] and batching.max_queue_delay_microseconds == 0
    assert batching.default_queue_policy.max_queue_size == 40
    assert not config.model_transaction_policy.decoupled
    cpu = triton_config.ModelInstanceGroup.KIND_CPU
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, cpu)]
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert parameters == {
        "batching_mode": "continuous", "max_batch_size": str(MAX_BATCH),
        "max_texts_per_request": str(MAX_BATCH), "max_batch_tokens": str(ServerConfig().max_batch_tokens),
        "max_queue_delay_ms": "5.0", "queue_size": "40", "max_beam_size": str(runner.max_beam),
        "max_output_tokens": str(runner.max_len - 1), "max_source_tokens": str(runner.max_len),
        "execution_provider": "CPUExecutionProvider", "variant": "base", "stream_parameter": "stream",
        "glossary_terms": "0",  # a --bundle model has no repository folder, so no glossary file
        "tasks": "", "default_task": "",  # the tiny bundle declares no task prefixes
    }
    with pytest.raises(triton.InferenceServerException, match="unknown model 'nope'"):
        client.get_model_config("nope")


def test_model_config_of_none_mode(tiny_bundle, runner):
    """Mode none is Triton's default scheduler: no dynamic_batching."""
    with BackgroundServer(server_config(tiny_bundle, batching="none"), runner) as srv, \
            triton_client(srv.address) as c:
        config = c.get_model_config("translator", as_json=False).config
    assert config.WhichOneof("scheduling_choice") is None
    assert config.parameters["batching_mode"].string_value == "none"


def test_statistics_count_requests_texts_and_executions(client):
    """After N single-text requests and one 3-text request: counts, durations and Prometheus agree."""
    n = 5
    before, prom_before, wall_before = stats(client), prometheus(), int(time.time() * 1000)
    for i in range(n):
        client.infer("translator", [text_input([TEXTS[i % len(TEXTS)]])])
    after, prom = stats(client), prometheus()
    wall_after = int(time.time() * 1000)
    b, a = before.inference_stats, after.inference_stats
    assert a.success.count - b.success.count == n and a.fail.count == b.fail.count
    assert after.inference_count - before.inference_count == n
    assert after.execution_count - before.execution_count == n  # one execution per sequential text
    assert delta(batch_counts(after), batch_counts(before)).keys() == {1}
    assert delta(batch_counts(after), batch_counts(before))[1][0] == n
    for part in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert getattr(a, part).count - getattr(b, part).count == n
        assert getattr(a, part).ns > getattr(b, part).ns, part
    success_ns = a.success.ns - b.success.ns
    parts_ns = sum(getattr(a, p).ns - getattr(b, p).ns
                   for p in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert abs(success_ns - parts_ns) <= 4 * n  # the four parts add up to the request (ns rounding)
    # a single text's queue time is its Prometheus queue-time observation
    assert abs((a.queue.ns - b.queue.ns) - (prom["queue_sum"] - prom_before["queue_sum"]) * 1e9) <= 10 * n
    # executions are encoder runs: same count and total time as the encoder histogram
    assert prom["encoder_count"] - prom_before["encoder_count"] == n
    encoder_ns = sum(ns for _, ns in delta(batch_counts(after), batch_counts(before)).values())
    assert abs(encoder_ns - (prom["encoder_sum"] - prom_before["encoder_sum"]) * 1e9) <= 10 * n
    # sequential requests: each one's compute spans its encoder run and all its decoder steps,
    # and each request lies within its RPC
    model_ns = sum(prom[k] - prom_before[k] for k in ("encoder_sum", "decoder_sum"))
    assert a.compute_infer.ns - b.compute_infer.ns >= model_ns * 1e9 - 1000 * n
    assert success_ns <= (prom["latency_sum"] - prom_before["latency_sum"]) * 1e9
    assert wall_before <= after.last_inference <= wall_after

    before = after
    client.infer("translator", [text_input(TEXTS[:3])])
    after = stats(client)
    assert after.inference_stats.success.count - before.inference_stats.success.count == 1
    assert after.inference_count - before.inference_count == 3
    assert after.execution_count - before.execution_count == 1  # the 3 texts join the model together
    assert delta(batch_counts(after), batch_counts(before)).keys() == {3}


def test_statistics_count_failures_that_reach_the_model(client):
    """An empty text fails in the scheduler (fail + 1); a malformed tensor never reaches it."""
    before = stats(client)
    with pytest.raises(triton.InferenceServerException, match="text 0 is empty"):
        client.infer("translator", [text_input([" "])])
    bad = triton.InferInput("TEXT", [1], "INT64")
    bad.set_data_from_numpy(np.array([1], dtype=np.int64))
    with pytest.raises(triton.InferenceServerException, match="expected BYTES"):
        client.infer("translator", [bad])
    after = stats(client)
    assert after.inference_stats.fail.count - before.inference_stats.fail.count == 1
    assert after.inference_stats.fail.ns > before.inference_stats.fail.ns
    assert after.inference_stats.success.count == before.inference_stats.success.count
    assert after.inference_count == before.inference_count


def test_statistics_rpc_selection(client):
    """"" = every model (ours); another model or version is NOT_FOUND; JSON works as in Triton."""
    every = client.get_inference_statistics("")
    assert [s.name for s in every.model_stats] == ["translator"]
    as_json = client.get_inference_statistics("translator", "1", as_json=True)
    assert as_json["model_stats"][0]["name"] == "translator"
    for name, version, match in (("nope", "", "unknown model 'nope'"), ("translator", "2", "no version '2'")):
        with pytest.raises(triton.InferenceServerException, match=match) as err:
            client.get_inference_statistics(name, version)
        assert err.value.status() == "StatusCode.NOT_FOUND"


def test_dynamic_mode_executes_one_batch_for_concurrent_requests(tiny_bundle, runner):
    """Dynamic batching: 4 concurrent texts fill one batch of 4 rows -> one execution of size 4."""
    config = server_config(tiny_bundle, batching="dynamic", max_batch_size=4,
                           max_queue_delay_ms=DYNAMIC_DELAY_MS)
    with BackgroundServer(config, runner) as srv, triton_client(srv.address) as c:
        model_config = c.get_model_config("translator").config
        assert list(model_config.dynamic_batching.preferred_batch_size) == [4]
        assert model_config.dynamic_batching.max_queue_delay_microseconds == DYNAMIC_DELAY_MS * 1000
        before = stats(c)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda t: c.infer("translator", [text_input([t])]), TEXTS[:4]))
        after = stats(c)
    assert after.inference_stats.success.count - before.inference_stats.success.count == 4
    assert after.inference_count - before.inference_count == 4
    assert after.execution_count - before.execution_count == 1
    assert delta(batch_counts(after), batch_counts(before)).keys() == {4}


def test_the_sentence_cache_counts_as_triton_counts_its_response_cache(tiny_bundle, runner):
    """A request the cache answers whole is a cache hit and a success, with no inference or execution; a
    request with a text to decode is a cache miss, its inference_count the texts it decoded."""
    config = server_config(tiny_bundle, sentence_cache_bytes=1 << 20)
    with BackgroundServer(config, runner) as srv, triton_client(srv.address) as c:
        before = stats(c)
        first = c.infer("translator", [text_input(TEXTS[:2])]).as_numpy("TRANSLATION").tolist()
        middle = stats(c)
        again = c.infer("translator", [text_input(TEXTS[:2])]).as_numpy("TRANSLATION").tolist()
        hit = stats(c)
        mixed = c.infer("translator", [text_input(TEXTS[1:3])]).as_numpy("TRANSLATION").tolist()
        after = stats(c)
    assert again == first and mixed[0] == first[1]

    def moved(b, a) -> dict[str, int]:
        named = {k: getattr(a.inference_stats, k).count - getattr(b.inference_stats, k).count
                 for k in ("cache_hit", "cache_miss", "success", "queue", "compute_infer")}
        return named | {"texts": a.inference_count - b.inference_count,
                        "executions": a.execution_count - b.execution_count}

    assert moved(before, middle) == {"cache_hit": 0, "cache_miss": 1, "success": 1, "queue": 1,
                                     "compute_infer": 1, "texts": 2, "executions": 1}
    assert moved(middle, hit) == {"cache_hit": 1, "cache_miss": 0, "success": 1, "queue": 0,
                                  "compute_infer": 0, "texts": 0, "executions": 0}
    assert hit.inference_stats.cache_hit.ns > middle.inference_stats.cache_hit.ns
    assert moved(hit, after) == {"cache_hit": 0, "cache_miss": 1, "success": 1, "queue": 1,
                                 "compute_infer": 1, "texts": 1, "executions": 1}
