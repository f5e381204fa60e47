"""Prometheus metrics: names, buckets, the request helper, model info and the HTTP endpoint."""

from __future__ import annotations

import urllib.request

import pytest

from service.ops import metrics
from service.ops.model_metrics import ModelMetrics
from tests.support.metrics import sample


@pytest.fixture
def metrics_port():
    """A metrics HTTP server on 127.0.0.1 with an OS-chosen port."""
    port = metrics.start_metrics_server(0, "127.0.0.1")
    yield port
    metrics.stop_metrics_servers()


def test_observe_request_counts_and_buckets_latency():
    labels = {"method": "test.Method"}
    count = sample("translator_requests_total", code="OK", **labels)
    failed = sample("translator_requests_total", code="INTERNAL", **labels)
    n = sample("translator_request_latency_seconds_count", **labels)
    total = sample("translator_request_latency_seconds_sum", **labels)
    le_1ms = sample("translator_request_latency_seconds_bucket", le="0.001", **labels)
    le_5ms = sample("translator_request_latency_seconds_bucket", le="0.005", **labels)
    metrics.observe_request("test.Method", "OK", 0.003)
    metrics.observe_request("test.Method", "OK", 0.0004)
    metrics.observe_request("test.Method", "INTERNAL", 2.0)
    assert sample("translator_requests_total", code="OK", **labels) == count + 2
    assert sample("translator_requests_total", code="INTERNAL", **labels) == failed + 1
    assert sample("translator_request_latency_seconds_count", **labels) == n + 3
    assert sample("translator_request_latency_seconds_sum", **labels) == pytest.approx(total + 2.0034)
    assert sample("translator_request_latency_seconds_bucket", le="0.001", **labels) == le_1ms + 1
    assert sample("translator_request_latency_seconds_bucket", le="0.005", **labels) == le_5ms + 2
    assert metrics.counter_value(metrics.REQUESTS, method="test.Method") == count + failed + 3
    assert metrics.histogram_count(metrics.REQUEST_LATENCY, method="test.Method") == n + 3


def test_bucket_layouts():
    assert metrics.TIME_BUCKETS[0] == 0.0005 and metrics.TIME_BUCKETS[-1] == 10.0
    assert list(metrics.TIME_BUCKETS) == sorted(metrics.TIME_BUCKETS)
    assert metrics.BATCH_BUCKETS == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
    labels = {"model": "buckets", "version": "1"}
    le4 = sample("translator_batch_size_bucket", le="4.0", **labels)
    le2 = sample("translator_batch_size_bucket", le="2.0", **labels)
    metrics.BATCH_SIZE.labels(**labels).observe(3)
    assert sample("translator_batch_size_bucket", le="4.0", **labels) == le4 + 1
    assert sample("translator_batch_size_bucket", le="2.0", **labels) == le2


def test_endpoint_serves_every_metric_and_model_info(metrics_port):
    values = {"provider": "CPUExecutionProvider", "batching": "continuous", "variant": "fp16"}
    metrics.set_model_series("tiny", "v9", 1024, values)
    metrics.observe_request("test.Endpoint", "OK", 0.01)
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        assert response.status == 200
        body = response.read().decode()
    assert ('translator_requests_total{code="OK",method="test.Endpoint",model="",protocol="grpc",version=""}'
            in body)
    for name in ("request_latency_seconds", "queue_time_seconds", "time_to_first_token_seconds",
                 "time_per_output_token_seconds", "encoder_compute_seconds", "decoder_step_seconds",
                 "batch_size", "input_tokens", "output_tokens"):
        assert f"# TYPE translator_{name} histogram" in body
    assert "# TYPE translator_queue_depth gauge" in body
    assert "# TYPE translator_active_sequences gauge" in body
    info = next(line for line in body.splitlines()
                if line.startswith("translator_model_info{") and 'model="tiny"' in line)
    for part in ('model="tiny"', 'version="v9"', 'provider="CPUExecutionProvider"', 'batching="continuous"',
                 'variant="fp16"'):
        assert part in info
    assert info.endswith(" 1.0")
    assert 'translator_model_resident_bytes{model="tiny",version="v9"} 1024.0' in body
    metrics.remove_model_series("tiny", "v9")
    assert [s for f in metrics.MODEL.collect() for s in f.samples if s.labels["model"] == "tiny"] == []


def test_each_model_version_records_its_own_series():
    """Two recorders: each observation lands in its model's series only; `remove` drops them."""
    a, b = ModelMetrics("a", "1"), ModelMetrics("b", "2")
    before = {m: sample("translator_decoder_step_seconds_count", model=m.model, version=m.version)
              for m in (a, b)}
    for _ in range(3):
        a.stepped(0.01, rows=4)
    b.stepped(0.01, rows=1)
    assert sample("translator_decoder_step_seconds_count", model="a", version="1") == before[a] + 3
    assert sample("translator_decoder_step_seconds_count", model="b", version="2") == before[b] + 1
    assert sample("translator_batch_size_sum", model="a", version="1") >= 12
    a.gauges(queue_depth=5, active=2)
    assert sample("translator_queue_depth", model="a", version="1") == 5
    a.encoded(texts=3, seconds=0.02)
    assert a.stats.snapshot().execution_count == 1 and b.stats.snapshot().execution_count == 0
    a.remove()
    assert sample("translator_queue_depth", model="a", version="1") == 0  # the series is gone
    b.remove()


def test_a_reloaded_version_keeps_its_series_until_the_last_recorder_goes():
    """A reload loads the same version beside the old one: removing the old keeps the new one's series."""
    old, new = ModelMetrics("reloaded", "1"), ModelMetrics("reloaded", "1")
    old.remove()
    new.gauges(queue_depth=3, active=1)
    assert sample("translator_queue_depth", model="reloaded", version="1") == 3
    old.remove()  # a second remove of the same recorder changes nothing
    assert sample("translator_queue_depth", model="reloaded", version="1") == 3
    new.remove()
    assert sample("translator_queue_depth", model="reloaded", version="1") == 0
