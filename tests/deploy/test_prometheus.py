"""Monitoring files against a real Prometheus (Debian package `prometheus`, installed by .ci/run).

Offline: every PromQL expression of the rules parses and selects only metrics the service exports or rules
record (the dashboard's: tests/deploy/test_dashboard.py). With the binary: promtool checks the rules, runs
their unit tests and checks the scrape config; then a real `python -m service.server` (tiny bundle) is
scraped every second through the shipped scrape job (its Kubernetes discovery replaced by file discovery
carrying the same pod metadata), the client sends traffic and measures latencies, and the test asks the
Prometheus HTTP API: histogram_quantile agrees with the client's quantiles within the histogram's bucket
bounds, and every rule, dashboard and autoscaler-adapter expression returns data."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.ops.metrics import TIME_BUCKETS
from tests.support import REPO_ROOT
from tests.support.deploy import (
    DEPLOY,
    RULES,
    adapter_rules,
    dashboard_queries,
    load,
    metric_sample_names,
    promql_selectors,
    recorded,
    render_adapter_query,
    rules,
)
from tests.support.polling import wait_until
from tests.support.server import TEXTS, base_env, free_port, running, wait_for_port_file
from tests.support.tools import require

RULE_TESTS = DEPLOY / "prometheus" / "translator-rules.test.yml"
CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
STREAM = "translator.v1.Translator/TranslateStream"
TRANSLATE = "translator.v1.Translator/Translate"
POD = {"namespace": "serving", "pod": "translator-6d5f8b7c9-x2x4q"}  # a Deployment pod's name
N_STREAMS, N_UNARY, N_BAD = 40, 6, 5


def binary(name: str) -> str:
    """Path of a Prometheus binary; `make test` installs it: skip without it, fail in CI."""
    found = shutil.which(name)
    require(found is not None, name, "`make test` installs the Debian package prometheus "
            "(`make prometheus-tools`)")
    return found


def test_rule_expressions_parse_and_read_exported_metrics():
    """Each rule parses and reads only translator_* series the service exports, rules, or `up`."""
    known = metric_sample_names() | recorded() | {"up"}
    for rule in rules():
        selected = promql_selectors(rule["expr"])
        assert selected and selected <= known, (rule.get("record") or rule["alert"], selected - known)
    for name in recorded():
        assert re.fullmatch(r"[a-z_]+:translator_[a-z_]+:[a-z0-9_]+", name), name


def keda_queries() -> dict[str, str]:
    """Trigger name -> PromQL of the KEDA ScaledObject's prometheus triggers (tests/deploy/test_keda.py
    evaluates them on fixture series)."""
    (scaled,) = load("keda-scaledobject.yaml")
    triggers = scaled["spec"]["triggers"]
    return {t["name"]: t["metadata"]["query"] for t in triggers if t["type"] == "prometheus"}


def derived_config(tmp: Path, targets: list[dict[str, Any]]) -> Path:
    """The shipped prometheus.yml for this test: 1 s intervals, absolute rule paths, and the pods
    discovered from a file (this Debian build has no Kubernetes discovery) with the same metadata."""
    config = yaml.safe_load(CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(CONFIG.parent / f) for f in config["rule_files"]]
    (job,) = config["scrape_configs"]
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    sd_file = tmp / "targets.json"
    sd_file.write_text(json.dumps(targets))
    job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": "1s"}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def pod_target(address: str, app: str = "translator", port_name: str = "metrics") -> dict[str, Any]:
    """A file-discovery target carrying what Kubernetes pod discovery would say about it."""
    return {"targets": [address], "labels": {
        "__meta_kubernetes_namespace": POD["namespace"], "__meta_kubernetes_pod_name": POD["pod"],
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
        "__meta_kubernetes_pod_container_port_name": port_name}}


def test_promtool_checks_rules_unit_tests_and_config(tmp_path):
    """promtool: the rules load, their unit tests pass, the scrape config is valid."""
    promtool = binary("promtool")
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)],
                 ["check", "config", str(derived_config(tmp_path, [pod_target("127.0.0.1:9")]))]):
        run = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr


class Prometheus:
    """The HTTP API of a running Prometheus."""

    def __init__(self, base: str) -> None:
        """API at `base` (http://127.0.0.1:port)."""
        self.base = base

    def get(self, path: str, **params: str) -> Any:
        """GET an API path; the `data` of a successful answer."""
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: {exc.code} {exc.read().decode()}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query at the current time: the result vector."""
        return self.get("/api/v1/query", query=expr)["result"]

    def value(self, expr: str) -> float:
        """The single value of an instant query (NaN when empty)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else math.nan

    def ready(self) -> bool:
        """Whether the server answers /-/ready."""
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


def stream(stub: pb_grpc.TranslatorStub, text: str, tokens: int) -> tuple[float, float]:
    """One TranslateStream call: (seconds to the first piece, seconds to the end), client-side."""
    start = time.perf_counter()
    first = math.nan
    request = pb.TranslateStreamRequest(text=text, options=pb.TranslateOptions(max_output_tokens=tokens))
    for message in stub.TranslateStream(request, timeout=60):
        if message.HasField("piece") and math.isnan(first):
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


def send_traffic(stub: pb_grpc.TranslatorStub, streams: int, unary: int, bad: int) -> tuple[list, list]:
    """Sequential calls (bounded): streams of varied lengths, 2-text unary calls, empty texts."""
    firsts, totals = [], []
    for i in range(streams):
        first, total = stream(stub, TEXTS[i % len(TEXTS)], (6, 12, 24, 40)[i % 4])
        firsts.append(first)
        totals.append(total)
    options = pb.TranslateOptions(max_output_tokens=16)
    for i in range(unary):
        texts = [TEXTS[i % len(TEXTS)], TEXTS[(i + 1) % len(TEXTS)]]
        stub.Translate(pb.TranslateRequest(texts=texts, options=options), timeout=60)
    for _ in range(bad):
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(pb.TranslateRequest(texts=[""]), timeout=60)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return firsts, totals


def buckets(api: Prometheus, expr: str) -> dict[float, float]:
    """Cumulative bucket counts {le: count} of a histogram selector, summed over other labels."""
    return {float(r["metric"]["le"]): float(r["value"][1]) for r in api.query(f"sum by (le) ({expr})")}


def check_quantile(api: Prometheus, selector: str, client: list[float], q: float) -> tuple[float, float]:
    """Prometheus' q-quantile of a histogram vs the client's: each server time is inside its client
    time, so the estimate is at most the bucket bound above the client quantile, and (loopback
    overhead being far below a bucket width) at least the lower edge of the bucket below it."""
    estimate = api.value(f"histogram_quantile({q}, sum by (le) ({selector}))")
    ordered = sorted(client)
    client_q = ordered[math.ceil(q * len(ordered)) - 1]
    bounds = [0.0, *TIME_BUCKETS]
    j = next(i for i, b in enumerate(bounds) if b >= client_q)
    assert bounds[max(j - 2, 0)] <= estimate <= bounds[j], (q, estimate, client_q)
    return estimate, client_q


def test_prometheus_scrapes_the_service_and_every_query_returns_data(tiny_bundle, tmp_path):
    """Real service, real Prometheus, real queries (bounded: every wait has a timeout)."""
    prometheus = binary("prometheus")
    port_file, metrics_port, web_port = tmp_path / "port", free_port(), free_port()
    server_argv = [sys.executable, "-m", "service.server", "--bundle", str(tiny_bundle),
                   "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
                   "--metrics-port", str(metrics_port), "--http-port", "-1",
                   "--providers", "CPUExecutionProvider", "--sentence-cache-bytes", "0"]  # it counts decodes
    env = base_env() | {"PYTHONPATH": str(REPO_ROOT)}
    with running(server_argv, env, REPO_ROOT, tmp_path / "server") as server:
        port = wait_for_port_file(server, port_file)
        targets = [pod_target(f"127.0.0.1:{metrics_port}"), pod_target(f"127.0.0.1:{port}", port_name="grpc"),
                   pod_target("127.0.0.1:9", app="something-else")]
        prom_argv = [prometheus, f"--config.file={derived_config(tmp_path, targets)}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web_port}",
                     "--log.level=warn"]
        with running(prom_argv, os.environ, tmp_path, tmp_path / "prometheus") as prom, \
                grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            api = Prometheus(f"http://127.0.0.1:{web_port}")
            wait_until(lambda: api.ready() or not prom.alive(), "Prometheus to be ready", 60)
            assert prom.alive(), prom.logs()
            wait_until(lambda: api.value('up{job="translator"}') == 1, "the first scrape", 30)
            check_targets(api, metrics_port)

            stub = pb_grpc.TranslatorStub(channel)
            # every series exists (and is scraped) before the measured traffic, so rates see all of it
            firsts, totals = send_traffic(stub, 1, 1, 1)
            count = f'sum(translator_requests_total{{job="translator",method="{STREAM}"}})'
            wait_until(lambda: api.value(count) == 1, "the first calls to be scraped", 20)
            more_firsts, more_totals = send_traffic(stub, N_STREAMS - 1, N_UNARY - 1, N_BAD - 1)
            firsts, totals = firsts + more_firsts, totals + more_totals
            unary = f'sum(translator_requests_total{{job="translator",method="{TRANSLATE}"}})'
            every = (N_STREAMS, N_UNARY + N_BAD)  # the unary and refused calls came after the streams
            wait_until(lambda: (api.value(count), api.value(unary)) == every, "every call to be scraped", 20)
            done = time.time()

            check_latency_against_client(api, firsts, totals)
            wait_until(lambda: rules_evaluated_since(api, done), "the rules to be evaluated again", 30)
            for rule in rules():
                if "record" in rule:
                    assert api.query(rule["record"]), f"{rule['record']} recorded nothing"
                    assert api.query(rule["expr"]), f"{rule['record']}: its expression returns nothing"
                else:
                    api.query(rule["expr"])  # an alert's expression must run (it need not fire)
            assert api.value('job:translator_request_errors:ratio_rate1m{job="translator"}') > 0
            assert api.value('job:translator_batch_size:mean_rate1m{job="translator"}') >= 1
            for query in dashboard_queries():
                assert api.query(query), f"dashboard query returns nothing: {query}"
            for rule in adapter_rules():
                labels = f'namespace="{POD["namespace"]}",pod="{POD["pod"]}"'
                result = api.query(render_adapter_query(rule, labels, "pod"))
                assert [r["metric"] for r in result] == [{"pod": POD["pod"]}], rule["name"]["as"]
            for name, query in keda_queries().items():  # the pod's namespace for the ScaledObject's
                (metric,) = promql_selectors(query)
                here = re.sub(r'namespace="[^"]+"', f'namespace="{POD["namespace"]}"', query)
                assert api.value(here) == api.value(f'sum({metric}{{pod="{POD["pod"]}"}})'), name


def check_targets(api: Prometheus, metrics_port: int) -> None:
    """The shipped relabeling keeps the metrics port of translator pods only and adds namespace/pod."""
    targets = api.get("/api/v1/targets")
    (active,) = targets["activeTargets"]
    assert active["labels"] == {"job": "translator", "instance": f"127.0.0.1:{metrics_port}", **POD}
    assert len(targets["droppedTargets"]) == 2


def check_latency_against_client(api: Prometheus, firsts: list[float], totals: list[float]) -> None:
    """Server histograms (through Prometheus) against what the client measured."""
    selector = f'translator_request_latency_seconds_bucket{{job="translator",method="{STREAM}"}}'
    server = buckets(api, selector)
    assert server[math.inf] == len(totals)
    for bound, count in server.items():  # a call inside its client time is inside every bound it is
        assert count >= sum(t <= bound for t in totals), bound
    total_sum = api.value(f'sum(translator_request_latency_seconds_sum{{method="{STREAM}"}})')
    assert 0 < total_sum <= sum(totals)
    for q in (0.5, 0.9, 0.99):
        estimate, client_q = check_quantile(api, selector, totals, q)
        print(f"p{round(q * 100)} latency: Prometheus {estimate:.4f} s, client {client_q:.4f} s")
    ttft = buckets(api, 'translator_time_to_first_token_seconds_bucket{job="translator"}')
    assert ttft[math.inf] >= len(firsts) + 2 * N_UNARY  # + the warm-up text
    for bound, count in ttft.items():
        assert count >= sum(t <= bound for t in firsts), bound
    assert api.value(f'sum(translator_requests_total{{job="translator",method="{TRANSLATE}",'
                     f'code="INVALID_ARGUMENT"}})') == N_BAD


def rules_evaluated_since(api: Prometheus, since: float) -> bool:
    """Every rule group evaluated after `since` (Unix time) without errors."""
    groups = api.get("/api/v1/rules")["groups"]
    assert groups and all(r["health"] != "err" for g in groups for r in g["rules"]), groups
    stamps = [g["lastEvaluation"] for g in groups]
    return all(parse_time(s) > since for s in stamps)


def parse_time(stamp: str) -> float:
    """RFC 3339 time with nanoseconds (as Prometheus writes it) -> Unix time."""
    from datetime import datetime

    head, _, frac = stamp.rstrip("Z").partition(".")
    zone = "+00:00"
    if "+" in frac or "-" in frac:
        cut = max(frac.find("+"), frac.find("-"))
        frac, zone = frac[:cut], frac[cut:]
    return datetime.fromisoformat(f"{head}.{(frac or '0')[:6]}{zone}").timestamp()
