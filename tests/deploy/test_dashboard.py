"""The Grafana dashboard (deploy/grafana) offline: its panels query only series the service exports or the
rules record, use only the variables it defines, do not overlap, cover what an operator watches, and read the
request series per model through the $model variable. Its queries against a real Prometheus:
tests/deploy/test_prometheus.py."""

from __future__ import annotations

import json
import re

from tests.support.deploy import (
    dashboard,
    dashboard_queries,
    metric_sample_names,
    promql_selectors,
    recorded,
    rules,
)

REQUEST_SERIES = re.compile(r"translator_requests|translator_request_latency|translator_request_errors")
SELECTOR = r"((?:[a-z_]+:)?translator_request[a-z_]*(?::[a-z0-9_]+)?)(\{[^}]*\})?"  # name, {labels}



def test_dashboard_uses_existing_metrics_variables_and_layout():
    """Panels query only known series, use only defined variables, do not overlap, and cover latency
    quantiles, time to first token, throughput, batch size, queue depth and errors by code."""
    board = dashboard()
    known = metric_sample_names() | recorded() | {"up"}
    defined = {v["name"] for v in board["templating"]["list"]}
    used = set()
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            used.update(re.findall(r"\$(\w+)", target["expr"]))
    assert used <= defined and "datasource" in defined
    for query in dashboard_queries():
        assert promql_selectors(query) <= known, query
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"]).group(1)
            assert promql_selectors(metric.replace("$job", ".+")) <= known
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & area, f"panel {p['title']} overlaps another"
        cells |= area
    text = json.dumps(board)
    for needed in ("request_latency_seconds:p50", "request_latency_seconds:p90",
                   "request_latency_seconds:p99", "time_to_first_token_seconds:p90",
                   "translator_texts:rate1m", "output_tokens:rate1m", "batch_size:mean_rate1m",
                   "queue_depth:sum", "job_model_code:translator_requests:rate1m"):
        assert needed in text, needed


def test_request_panels_filter_by_the_model_variable():
    """Every panel query of the request series (model and version labelled) reads per-model rules and
    filters by $model, whose "All" keeps the calls of model "" and "(unknown)" too; the per-model rules
    keep `model`, and the alert on the error ratio says which model."""
    board = dashboard()
    (model,) = [v for v in board["templating"]["list"] if v["name"] == "model"]
    assert re.fullmatch(model["allValue"], "") and re.fullmatch(model["allValue"], "(unknown)")
    request_queries = [t["expr"] for p in board["panels"] for t in p["targets"]
                       if REQUEST_SERIES.search(t["expr"])]
    assert len(request_queries) >= 6
    for expr in request_queries:
        for name, labels in re.findall(SELECTOR, expr):
            assert name.startswith("job_model") and 'model=~"$model"' in labels, expr
    by_model = [r for r in rules()
                if r.get("record", "").startswith("job_model") and REQUEST_SERIES.search(r["expr"])]
    assert {r["record"].split(":")[1] for r in by_model} == {
        "translator_requests", "translator_request_errors", "translator_request_latency_seconds"}
    for rule in by_model:
        assert all("model" in by for by in re.findall(r"by \(([^)]*)\)", rule["expr"])), rule["record"]
    (alert,) = [r for r in rules() if r.get("alert") == "TranslatorHighErrorRatio"]
    assert alert["expr"].startswith("job_model:") and "$labels.model" in alert["annotations"]["summary"]
