"""Kubernetes manifests (deploy/kubernetes/): built-in kinds validated against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), custom resources structurally, and the cross-references that
no schema sees: selectors and labels, ports, probes, environment variables the server really reads,
the termination budget, the autoscaler's metrics and the adapter rules that produce them."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest

from service.config import _FLAGS, ServerConfig, env_name
from tests.support.deploy import (
    K8S,
    adapter_rules,
    load,
    metric_sample_names,
    promql_selectors,
    render_adapter_query,
)

FLAG_ENV = {env_name(flag) for flag, _, _ in _FLAGS}
# the oldest release with GA gRPC probes and autoscaling/v2, and the newest the package knows
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
CUSTOM_KINDS = {("serving.kserve.io/v1beta1", "InferenceService"),
                ("monitoring.coreos.com/v1", "ServiceMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}
# fields of KEDA's ScaledObject (keda.sh/v1alpha1) and of its prometheus trigger, as KEDA documents them
KEDA_SPEC = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
             "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers"}
KEDA_TRIGGER = {"type", "name", "metadata", "metricType", "useCachedMetrics", "authenticationRef"}
KEDA_PROMETHEUS = {"serverAddress", "query", "threshold", "activationThreshold", "namespace", "customHeaders",
                   "ignoreNullValues", "unsafeSsl", "queryParameters"}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file, resource) of every Kubernetes resource (not the kustomization or the Helm values)."""
    skip = {"kustomization.yaml", "prometheus-adapter-values.yaml"}
    return [(p.name, doc) for p in sorted(K8S.glob("*.yaml")) if p.name not in skip for doc in load(p.name)]


def one(kind: str, name: str) -> dict[str, Any]:
    """The resource of that kind and name."""
    found = [doc for _, doc in manifests() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A label selector (equality form) matches these labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The single container of a pod spec."""
    assert len(pod_spec["containers"]) == 1
    return pod_spec["containers"][0]


def env_of(c: dict[str, Any]) -> dict[str, str]:
    """A container's literal environment variables."""
    return {e["name"]: e["value"] for e in c.get("env", [])}


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    """The translator Deployment."""
    return one("Deployment", "translator")


@pytest.mark.parametrize("version", VERSIONS)
def test_builtin_kinds_validate_against_the_kubernetes_schemas(version):
    """Every built-in resource passes strict schema validation (unknown fields rejected)."""
    checked = 0
    for _, doc in manifests():
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 5


def test_validation_rejects_broken_manifests(deployment):
    """The validator is no rubber stamp: a misspelt field or a named gRPC probe port fail."""
    bad = copy.deepcopy(deployment)
    container(bad["spec"]["template"]["spec"])["readinessProbe"]["grpc"]["prot"] = 8001
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    bad = copy.deepcopy(deployment)
    container(bad["spec"]["template"]["spec"])["livenessProbe"]["grpc"]["port"] = "grpc"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_deployment_ports_probes_env_gpu_and_termination(deployment):
    """Container ports equal the server's ports; native gRPC probes on the gRPC port; only variables the
    server reads; a GPU; the grace period outlasts preStop + drain."""
    spec = deployment["spec"]
    assert matches(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    pod = spec["template"]["spec"]
    c = container(pod)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    env = env_of(c)
    assert set(env) <= FLAG_ENV, f"variables no flag reads: {set(env) - FLAG_ENV}"
    defaults = ServerConfig()
    assert ports == {"grpc": int(env["TRANSLATOR_PORT"]), "metrics": int(env["TRANSLATOR_METRICS_PORT"]),
                     "http": int(env["TRANSLATOR_HTTP_PORT"])}
    assert ports == {"grpc": defaults.port, "metrics": defaults.metrics_port, "http": defaults.http_port}
    assert env["TRANSLATOR_HOST"] == env["TRANSLATOR_METRICS_HOST"] == "0.0.0.0"  # probes, scrapes
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"], probe
    # liveness must not kill a pod that is still loading: the startup probe covers loading
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 120
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == 1
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain = float(env.get("TRANSLATOR_DRAIN_GRACE_S", defaults.drain_grace_s))
    assert pod["terminationGracePeriodSeconds"] > float(pre_stop[1]) + drain
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    security = c["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001


def test_services_select_the_pods_and_target_named_ports(deployment):
    """Both Services select the Deployment's pods; their target ports exist on the container; the
    headless one has no cluster IP and no metrics port (so a ServiceMonitor scrapes each pod once)."""
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    c = container(deployment["spec"]["template"]["spec"])
    by_name = {p["name"]: p["containerPort"] for p in c["ports"]}
    for name in ("translator", "translator-headless"):
        service = one("Service", name)
        assert matches(service["spec"]["selector"], labels), name
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in by_name, f"{name}: no container port {port['targetPort']}"
            assert port["port"] == by_name[port["targetPort"]]
    headless = one("Service", "translator-headless")["spec"]
    assert headless["clusterIP"] == "None" and not headless.get("publishNotReadyAddresses", False)
    assert [p["name"] for p in headless["ports"]] == ["grpc"]
    pdb = one("PodDisruptionBudget", "translator")
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels)


def test_service_monitor_scrapes_the_metrics_port():
    """The ServiceMonitor selects only the Service with the metrics port, and names that port."""
    monitor = one("ServiceMonitor", "translator")["spec"]
    selected = [doc for _, doc in manifests() if doc["kind"] == "Service"
                and matches(monitor["selector"]["matchLabels"], doc["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in selected] == ["translator"]
    names = {p["name"] for p in selected[0]["spec"]["ports"]}
    assert {e["port"] for e in monitor["endpoints"]} <= names


def test_hpa_metrics_come_from_adapter_rules_over_real_series(deployment):
    """The HPA scales the Deployment on per-pod metrics that an adapter rule names; each rule reads a
    series the service exports, maps namespace/pod, and renders to valid PromQL."""
    hpa = one("HorizontalPodAutoscaler", "translator")["spec"]
    target = hpa["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    rules = adapter_rules()
    served = {r["name"]["as"] for r in rules}
    wanted = {m["pods"]["metric"]["name"] for m in hpa["metrics"] if m["type"] == "Pods"}
    assert wanted and wanted <= served, wanted - served
    exported = metric_sample_names()
    for rule in rules:
        (series,) = promql_selectors(rule["seriesQuery"])
        assert series in exported, series
        assert re.fullmatch(rule["name"]["matches"], series)
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                                  "pod": {"resource": "pod"}}
        query = render_adapter_query(rule, 'namespace="default",pod=~"a|b"', "pod")
        assert promql_selectors(query) == {series}


def test_keda_scaled_object_scales_the_deployment_on_exported_gauges(deployment):
    """The ScaledObject (KEDA's alternative to the HPA) targets the Deployment with the HPA's bounds and
    behavior (the behavior valid as an autoscaling/v2 one), uses only fields KEDA knows, and each prometheus
    trigger asks the adapter's Prometheus a query that parses, reads only gauges the service exports
    (queue depth and texts in flight) of this Deployment's pods, and has a positive threshold."""
    scaled = one("ScaledObject", "translator")
    spec = scaled["spec"]
    hpa = one("HorizontalPodAutoscaler", "translator")["spec"]
    assert set(spec) <= KEDA_SPEC, set(spec) - KEDA_SPEC
    target = spec["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment",
                                                                      deployment["metadata"]["name"])
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == hpa["behavior"]
    as_hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "t"},
              "spec": {"scaleTargetRef": target, "maxReplicas": 8, "behavior": behavior}}
    kubernetes_validate.validate(as_hpa, VERSIONS[-1], strict=True)
    values = load("prometheus-adapter-values.yaml")[0]["prometheus"]
    gauges = {name for name in metric_sample_names()
              if name in ("translator_queue_depth", "translator_active_sequences")}
    read = set()
    for trigger in spec["triggers"]:
        assert set(trigger) <= KEDA_TRIGGER and trigger["type"] == "prometheus", trigger
        assert trigger.get("metricType", "AverageValue") == "AverageValue"  # per pod, as the HPA's targets
        meta = trigger["metadata"]
        assert set(meta) <= KEDA_PROMETHEUS and float(meta["threshold"]) > 0, meta
        assert meta["serverAddress"] == f"{values['url']}:{values['port']}"
        selected = promql_selectors(meta["query"])
        assert selected and selected <= gauges, selected
        read |= selected
        for name in selected:
            matchers = re.search(name + r"\{([^}]*)\}", meta["query"]).group(1)
            assert 'namespace="' in matchers and 'pod=~"' in matchers, meta["query"]
            pods = re.search(r'pod=~"([^"]+)"', matchers).group(1)
            assert re.fullmatch(pods, "translator-6d5f8b7c9-x2x4q")  # a Deployment pod's name
            assert not re.fullmatch(pods, "translator-predictor-6d5f8b7c9-x2x4q")  # KServe's
    assert read == gauges == {"translator_queue_depth", "translator_active_sequences"}
    kustomization = load("kustomization.yaml")[0]
    assert "keda-scaledobject.yaml" not in kustomization["resources"]  # KEDA and hpa.yaml never both


def test_kserve_predictor_uses_the_image_contract(deployment):
    """The InferenceService runs the same image with its gRPC port named h2c (KServe's gRPC port name),
    probes on it, only real variables, and the same termination budget."""
    isvc = one("InferenceService", "translator")
    predictor = isvc["spec"]["predictor"]
    c = container(predictor)
    deploy_c = container(deployment["spec"]["template"]["spec"])
    assert c["image"] == deploy_c["image"]
    env = env_of(c)
    assert set(env) <= FLAG_ENV
    (port,) = c["ports"]
    assert port["name"] == "h2c" and port["containerPort"] == int(env["TRANSLATOR_PORT"])
    assert c["readinessProbe"]["grpc"]["port"] == c["livenessProbe"]["grpc"]["port"] == port["containerPort"]
    annotations = isvc["metadata"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == int(env["TRANSLATOR_METRICS_PORT"])
    sleep = float(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert predictor["terminationGracePeriodSeconds"] > sleep + float(env["TRANSLATOR_DRAIN_GRACE_S"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_kserve_rest_inference_service_serves_the_http_port(deployment):
    """The REST InferenceService runs the same image with its one port the server's HTTP port (not
    named h2c: KServe routes it as HTTP), probed by KServe v2 REST's health paths."""
    c = container(one("InferenceService", "translator-http")["spec"]["predictor"])
    assert c["image"] == container(deployment["spec"]["template"]["spec"])["image"]
    env = env_of(c)
    assert set(env) <= FLAG_ENV
    (port,) = c["ports"]
    assert port["name"] != "h2c" and port["containerPort"] == int(env["TRANSLATOR_HTTP_PORT"])
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": port["containerPort"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": port["containerPort"]}


def test_kustomization_lists_existing_builtin_resources():
    """kubectl apply -k applies exactly the built-in resources (no CRD that may be missing)."""
    kustomization = load("kustomization.yaml")[0]
    for name in kustomization["resources"]:
        assert (K8S / name).is_file(), name
        for doc in load(name):
            assert (doc["apiVersion"], doc["kind"]) not in CUSTOM_KINDS, name
    builtin = {p.name for p in K8S.glob("*.yaml") for doc in load(p.name)
               if "kind" in doc and doc["kind"] in {"Deployment", "Service", "HorizontalPodAutoscaler",
                                                     "PodDisruptionBudget"}}
    assert builtin == set(kustomization["resources"])


def test_every_manifest_parses_to_a_known_kind():
    """No stray document: each has apiVersion, kind and a name."""
    kinds = {(doc["apiVersion"], doc["kind"]) for _, doc in manifests()}
    assert kinds == {("apps/v1", "Deployment"), ("v1", "Service"),
                     ("autoscaling/v2", "HorizontalPodAutoscaler"), ("policy/v1", "PodDisruptionBudget"),
                     *CUSTOM_KINDS}
    assert all(doc["metadata"]["name"] for _, doc in manifests())
