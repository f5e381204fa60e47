"""Helpers of the deployment tests: the metric names the service exports, PromQL, the Prometheus rules and
the Grafana dashboard's queries, Kubernetes files (server processes and free ports:
tests/support/server.py)."""

from __future__ import annotations

import json
from typing import Any

import promql_parser
import yaml

from tests.support import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "translator-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "translator-dashboard.json"
K8S = DEPLOY / "kubernetes"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "info": ("_info",), "summary": ("", "_sum", "_count", "_created")}


def metric_sample_names() -> set[str]:
    """Every sample name the service exports (translator_*), derived from service/ops/metrics.py."""
    from prometheus_client import REGISTRY

    from service.ops import metrics  # noqa: F401 - registers the translator_* collectors

    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("translator_"):
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def promql_selectors(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (raises ValueError when it does not parse)."""
    names: set[str] = set()

    def visit(node: object) -> None:
        """Collect the name of every vector selector."""
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def load(name: str) -> list[dict[str, Any]]:
    """The YAML documents of one file of deploy/kubernetes."""
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def adapter_rules() -> list[dict[str, Any]]:
    """The custom rules of prometheus-adapter-values.yaml."""
    values = load("prometheus-adapter-values.yaml")[0]
    assert values["rules"]["default"] is False
    return values["rules"]["custom"]


def render_adapter_query(rule: dict[str, Any], matchers: str, group_by: str) -> str:
    """The adapter's metricsQuery with its template fields filled in, as the adapter does."""
    series = next(iter(promql_selectors(rule["seriesQuery"])))
    return (rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", group_by))


def rules() -> list[dict[str, Any]]:
    """Every rule of the rules file."""
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def recorded() -> set[str]:
    """Names the recording rules write."""
    return {rule["record"] for rule in rules() if "record" in rule}


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard."""
    return json.loads(DASHBOARD.read_text())


def all_values() -> dict[str, str]:
    """"$name" -> the "All" value of each query variable of the dashboard."""
    return {f"${v['name']}": v["allValue"] for v in dashboard()["templating"]["list"] if v["type"] == "query"}


def dashboard_queries() -> list[str]:
    """Every panel query with the template variables set to their "All" values."""
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in all_values().items():
                expr = expr.replace(name, value)
            queries.append(expr)
    return queries
