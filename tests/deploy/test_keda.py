"""The KEDA ScaledObject's queries (deploy/kubernetes/keda-scaledobject.yaml) evaluated by Prometheus'
engine (promtool, Debian's package `prometheus`) on fixture series, the value checked against what the
series imply (tests/deploy/test_prometheus.py runs them against a live Prometheus too, and
tests/deploy/test_deploy_kubernetes.py validates the manifest)."""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from tests.support.deploy import load, promql_selectors
from tests.support.tools import require


def keda_queries() -> dict[str, str]:
    """Trigger name -> PromQL of the ScaledObject's prometheus triggers."""
    (scaled,) = load("keda-scaledobject.yaml")
    triggers = scaled["spec"]["triggers"]
    return {t["name"]: t["metadata"]["query"] for t in triggers if t["type"] == "prometheus"}


# fixture series: (namespace, pod, model) -> value; the Deployment's pods (translator-<hash>-<suffix>) in
# the ScaledObject's namespace count, KServe's predictor pods and other namespaces do not
KEDA_SERIES = {("default", "translator-6d5f8b7c9-x2x4q", "translator"): 7,
               ("default", "translator-6d5f8b7c9-b4n8k", "translator"): 5,
               ("default", "translator-6d5f8b7c9-b4n8k", "opus-en-de"): 2,
               ("default", "translator-predictor-7c9d5-q2w3e", "translator"): 100,
               ("staging", "translator-6d5f8b7c9-x2x4q", "translator"): 50}


def keda_expected(namespace: str) -> float:
    """What the fixture series imply for a ScaledObject trigger: the sum over the Deployment's pods of the
    namespace (pod names of three parts: translator, the template hash, the suffix)."""
    return float(sum(v for (ns, pod, _), v in KEDA_SERIES.items()
                     if ns == namespace and re.fullmatch(r"translator-[a-z0-9]+-[a-z0-9]+", pod)))


def test_keda_queries_sum_the_deployments_pods(tmp_path):
    """promtool evaluates each ScaledObject trigger's query on fixture series: the sum over the
    Deployment's pods of its namespace (a pod serving two models counts both), nothing of KServe's pods or
    other namespaces, and 0 rather than nothing when no pod has the series yet."""
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool", "`make test` installs the Debian package prometheus "
            "(`make prometheus-tools`)")
    (namespace,) = set(re.findall(r'namespace="([^"]+)"', " ".join(keda_queries().values())))
    tests = []
    for name, query in keda_queries().items():
        (metric,) = promql_selectors(query)
        series = [{"series": f'{metric}{{namespace="{ns}",pod="{pod}",model="{model}",version="1"}}',
                   "values": f"0 {value} {value}"} for (ns, pod, model), value in KEDA_SERIES.items()]
        others = [s for s, (ns, pod, _) in zip(series, KEDA_SERIES, strict=True)
                  if ns != namespace or "predictor" in pod]
        for given, expected in ((series, keda_expected(namespace)), (others, 0.0)):
            tests.append({"interval": "1m", "input_series": given, "promql_expr_test": [
                {"expr": query, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": expected}]}]})
        assert keda_expected(namespace) > 0, name
    unit = tmp_path / "keda.test.yml"
    unit.write_text(yaml.safe_dump({"evaluation_interval": "1m", "tests": tests}))
    run = subprocess.run([promtool, "test", "rules", str(unit)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
