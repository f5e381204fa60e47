"""The Kubernetes manifests (deploy/kubernetes) against the built CPU image: the Deployment, the Services,
the HorizontalPodAutoscaler and the KEDA ScaledObject, both KServe InferenceServices and the ModelMesh
ServingRuntime name ports the image exposes and serves on, its user, its entrypoint, variables its
entrypoint reads, paths that exist in it, and read-only mounts it serves from. Their containers run as
the manifests say (variables, arguments, user, read-only root, emptyDir as tmpfs, memory limit, each in its
own network namespace, ports published on 127.0.0.1) and their probes run against them: gRPC health, HTTP
readiness and liveness, the scrape of the metrics port, the preStop command, and the termination budget.

The whole module is skipped (one line) where podman cannot run containers."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from deploy.image import container
from protos.modelmesh import model_runtime_pb2 as mm
from protos.modelmesh import model_runtime_pb2_grpc as mm_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from tests.support.deploy import load, promql_selectors
from tests.support.image import BUNDLE, Image, cannot_run, host_translation, image_under_test, repository_of
from tests.support.kserve import text_input, triton_client

pytestmark = pytest.mark.slow  # a build on a cold cache takes minutes: beside the suite (Makefile)
if (why := cannot_run("host", "bridge")) is not None:
    pytest.skip(why, allow_module_level=True)

TEXT = "Send 4,217 apples on the 3rd."
GPU_ONLY = {"TRANSLATOR_REQUIRE_PROVIDER"}  # a pod given a GPU fails start-up without CUDA: checked apart
CUDA_IMAGE_ONLY = {"TRANSLATOR_PROVIDERS"}  # the CUDA image's value: CUDA first (this image falls back)
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9, "": 1}
MODEL_ID = "opus-en-de__isvc-0123456789"  # ModelMesh Serving's ids: <InferenceService>__isvc-<hash>


def one(file: str, kind: str) -> dict[str, Any]:
    """The one resource of `kind` in a file of deploy/kubernetes."""
    (found,) = [doc for doc in load(file) if doc["kind"] == kind]
    return found


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    """A container's literal environment variables."""
    return {e["name"]: e["value"] for e in spec.get("env", [])}


def containers() -> dict[str, dict[str, Any]]:
    """Every container spec of the manifests that runs the image, by where it comes from."""
    (deployment,) = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]["containers"]
    (grpc_isvc,) = one("kserve-inferenceservice.yaml", "InferenceService")["spec"]["predictor"]["containers"]
    (http_isvc,) = one("kserve-inferenceservice-http.yaml", "InferenceService")["spec"]["predictor"][
        "containers"]
    (runtime,) = runtime_spec()["containers"]
    return {"Deployment": deployment, "InferenceService translator": grpc_isvc,
            "InferenceService translator-http": http_isvc, "ServingRuntime": runtime}


def runtime_spec() -> dict[str, Any]:
    """The ModelMesh ServingRuntime's spec."""
    (doc,) = load("modelmesh/servingruntime.yaml")
    return doc["spec"]


def quantity(text: str) -> int:
    """A Kubernetes memory quantity in bytes (4Gi -> 4294967296)."""
    number, unit = re.fullmatch(r"([0-9]+)([KMG]i?)?", text).groups()
    return int(number) * UNITS[unit or ""]


@pytest.fixture(scope="module")
def image() -> Image:
    """The CPU image (built once per session)."""
    return image_under_test()


@pytest.fixture(scope="module")
def helped(image: Image) -> str:
    """The entrypoint's --help, which names every flag and its variable."""
    return container.run_once(image.tag, "--help").stdout


def pod_options(spec: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    """container.run options doing what a manifest's container and pod spec ask of the runtime."""
    security, pod_security = spec.get("securityContext", {}), (pod or {}).get("securityContext", {})
    user = pod_security.get("runAsUser")
    options: dict[str, Any] = {
        "network": "bridge", "publish": [p["containerPort"] for p in spec.get("ports", [])],
        "read_only": bool(security.get("readOnlyRootFilesystem")),
        "user": f"{user}:{pod_security.get('runAsGroup', user)}" if user is not None else None,
        "memory": str(quantity(spec["resources"]["limits"]["memory"])),
        "args": list(spec.get("args", [])),
        "env": {k: v for k, v in env_of(spec).items() if k not in GPU_ONLY},
    }
    empty = {v["name"] for v in (pod or {}).get("volumes", []) if "emptyDir" in v}
    options["tmpfs"] = [m["mountPath"] for m in spec.get("volumeMounts", []) if m["name"] in empty]
    return options


@pytest.fixture(scope="module")
def pods(image: Image, tmp_path_factory) -> Iterator[dict[str, container.Container]]:
    """Side by side: the Deployment's container; the same with its GPU guard (start-up must fail on this
    CPU image); the ServingRuntime's container on a model repository mounted where its volume goes."""
    pod = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    deployment = containers()["Deployment"]
    runtime = containers()["ServingRuntime"]
    (isvc,) = load("modelmesh/inferenceservice.yaml")
    folder = isvc["spec"]["predictor"]["model"]["storage"]["path"]
    repository = repository_of(BUNDLE, tmp_path_factory.mktemp("models") / "repository", folder)
    (mount,) = [m for m in runtime["volumeMounts"] if m.get("readOnly")]
    guarded = pod_options(deployment, pod) | {"publish": []}
    guarded["env"] |= {k: v for k, v in env_of(deployment).items() if k in GPU_ONLY}
    mesh = pod_options(runtime) | {"mounts": {repository: mount["mountPath"]},
                                   "publish": [int(runtime_spec()["grpcEndpoint"].split(":")[1])]}
    assert runtime["command"] == image.config["Entrypoint"]
    started = {"deployment": container.run(image.tag, **pod_options(deployment, pod)),
               "guarded": container.run(image.tag, **guarded), "modelmesh": container.run(image.tag, **mesh)}
    try:
        yield started
    finally:
        for ctr in started.values():
            ctr.remove()


def http_get(address: str, path: str) -> tuple[int, str]:
    """GET http://address/path: (status, body)."""
    with urllib.request.urlopen(f"http://{address}{path}", timeout=30) as reply:
        return reply.status, reply.read().decode()


def test_manifests_name_the_image_user_ports_entrypoint_and_variables(image, helped):
    """Containers run image `translator`; the pod's user is the image's; every container port is one the
    image exposes and sets its variable to; every variable is one the entrypoint reads, with the image's
    value where the image sets one; the ServingRuntime's command is the image's entrypoint."""
    assert image.tag.rsplit("/", 1)[-1].split(":")[0] == "translator"
    pod = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == image.user and pod["runAsNonRoot"]
    port_variables = {"TRANSLATOR_HTTP_PORT", "TRANSLATOR_PORT", "TRANSLATOR_METRICS_PORT"}
    image_ports = {int(image.env[v]) for v in port_variables}
    assert image_ports == image.exposed
    for where, spec in containers().items():
        assert spec["image"].split(":")[0] == "translator", where
        env = env_of(spec)
        unread = [name for name in env if f"[{name};" not in helped]
        assert not unread, f"{where}: variables the entrypoint does not read: {unread}"
        for name, value in env.items():
            if name in image.env and name not in CUDA_IMAGE_ONLY:
                assert value == image.env[name], (where, name, value, image.env[name])
        ports = {p["containerPort"] for p in spec.get("ports", [])}
        assert ports <= image.exposed, (where, ports)
        assert ports <= {int(env.get(v, image.env[v])) for v in port_variables}, where
    assert int(runtime_spec()["grpcEndpoint"].split(":")[1]) in image.exposed
    for service in load("service.yaml"):
        names = {p["name"]: p["containerPort"] for p in containers()["Deployment"]["ports"]}
        assert {names[p["targetPort"]] for p in service["spec"]["ports"]} <= image.exposed


def test_paths_the_manifests_name_exist_in_the_image(image):
    """The commands they run (python, the preStop sleep) are on the image's PATH; emptyDir mounts land
    on folders of the image; read-only mounts hide nothing the server needs."""
    commands = {spec["lifecycle"]["preStop"]["exec"]["command"][0] for spec in containers().values()
                if "lifecycle" in spec} | {containers()["ServingRuntime"]["command"][0]}
    pod = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    folders = [m["mountPath"] for m in containers()["Deployment"]["volumeMounts"] if m["name"] in empty]
    mounts = [m["mountPath"] for spec in containers().values() for m in spec.get("volumeMounts", [])]
    script = f"for c in {' '.join(sorted(commands))}; do command -v $c || echo missing $c; done; " \
             f"for d in {' '.join(folders)}; do test -d $d && echo folder $d || echo missing $d; done"
    done = container.run_once(image.tag, "-c", script, entrypoint="sh")
    assert done.returncode == 0 and "missing" not in done.stdout, done.stdout + done.stderr
    assert "/opt/venv/bin/python" in done.stdout.splitlines()
    served = [image.env["TRANSLATOR_BUNDLE"], "/app", "/opt/venv", image.config["WorkingDir"]]
    for mount in mounts:
        assert not any(p == mount or p.startswith(mount.rstrip("/") + "/") for p in served), mount


def test_the_deployments_probes_scrape_and_prestop_pass_against_its_container(pods):
    """The Deployment's gRPC startup / readiness / liveness probes and both InferenceServices' probes
    (their containers differ from the Deployment's only in fewer variables) pass on the published ports;
    Prometheus' scrape of the annotated port and path finds the service's series; preStop runs."""
    ctr = pods["deployment"]
    spec = containers()["Deployment"]
    container.until_serving(ctr, spec["startupProbe"]["grpc"]["port"])
    deployment_env = env_of(spec)
    probes = [(where, name, s[name]) for where, s in containers().items() if where != "ServingRuntime"
              for name in ("startupProbe", "readinessProbe", "livenessProbe") if name in s]
    for where, s in containers().items():
        if where.startswith("InferenceService"):
            assert env_of(s).items() <= deployment_env.items(), where
    assert len(probes) >= 7
    for where, name, probe in probes:
        if "grpc" in probe:
            assert container.health(ctr.address(probe["grpc"]["port"]), 5.0) == "SERVING", (where, name)
        else:
            status, _ = http_get(ctr.address(probe["httpGet"]["port"]), probe["httpGet"]["path"])
            assert 200 <= status < 400, (where, name, status)
    annotations = one("deployment.yaml", "Deployment")["spec"]["template"]["metadata"]["annotations"]
    scrape = ctr.address(int(annotations["prometheus.io/port"]))
    status, text = http_get(scrape, annotations["prometheus.io/path"])
    assert status == 200 and "translator_queue_depth" in text and "translator_requests_total" in text
    command = spec["lifecycle"]["preStop"]["exec"]["command"]
    ran = ctr.exec(command[0], "0")  # the preStop command, its pause cut to nothing
    assert ran.returncode == 0, ran.stderr


def test_autoscalers_read_series_the_image_exports(pods):
    """The series the HPA's adapter rules and the KEDA ScaledObject's queries select are on the running
    image's /metrics."""
    ctr = pods["deployment"]
    container.until_serving(ctr, 8001)
    spec = containers()["Deployment"]
    metrics = next(p["containerPort"] for p in spec["ports"] if p["name"] == "metrics")
    _, text = http_get(ctr.address(metrics), "/metrics")
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    adapter = load("prometheus-adapter-values.yaml")[0]["rules"]["custom"]
    selected = {name for rule in adapter for name in promql_selectors(rule["seriesQuery"])}
    keda = one("keda-scaledobject.yaml", "ScaledObject")
    selected |= {name for trigger in keda["spec"]["triggers"] for name in promql_selectors(
        trigger["metadata"]["query"])}
    assert selected and selected <= exported, selected - exported


def test_the_gpu_guard_fails_start_up_on_the_cpu_image(pods):
    """With the Deployment's TRANSLATOR_REQUIRE_PROVIDER (pods given a GPU), the CPU image refuses to start
    and says why, instead of serving on the CPU."""
    ctr = pods["guarded"]
    code = ctr.wait(120)
    logs = ctr.logs()
    assert code != 0 and "CUDAExecutionProvider" in logs and "error" in logs.lower(), logs[-2000:]


def test_the_deployment_stops_within_its_termination_budget(pods):
    """SIGTERM and the grace the kubelet leaves after preStop: the container exits 0 (drained, not
    killed)."""
    ctr = pods["deployment"]
    container.until_serving(ctr, 8001)
    pod = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    pause = float(containers()["Deployment"]["lifecycle"]["preStop"]["exec"]["command"][1])
    grace = int(pod["terminationGracePeriodSeconds"] - pause)
    ctr.signal("TERM")
    assert ctr.wait(grace) == 0, ctr.logs()[-2000:]


def test_the_serving_runtime_loads_a_model_of_its_read_only_repository(pods):
    """ModelMesh's calls on the ServingRuntime's container: runtimeStatus READY with the memory budget as
    capacity, loadModel of the InferenceService's storage path, inference by the model id (KServe v2 and
    translator.v1) answering what the host answers."""
    ctr = pods["modelmesh"]
    port = int(runtime_spec()["grpcEndpoint"].split(":")[1])
    container.until_serving(ctr, port)
    env = env_of(containers()["ServingRuntime"])
    (isvc,) = load("modelmesh/inferenceservice.yaml")
    folder = isvc["spec"]["predictor"]["model"]["storage"]["path"]
    with grpc.insecure_channel(ctr.address(port)) as channel:
        mesh = mm_grpc.ModelRuntimeStub(channel)
        status = mesh.runtimeStatus(mm.RuntimeStatusRequest(), timeout=60)
        assert status.status == mm.RuntimeStatusResponse.READY
        assert status.capacityInBytes == quantity(env["TRANSLATOR_MEMORY_BUDGET"].removesuffix("B"))
        loaded = mesh.loadModel(mm.LoadModelRequest(modelId=MODEL_ID, modelType="translator-bundle",
                                                    modelPath=folder, modelKey="{}"), timeout=120)
        assert loaded.sizeInBytes > 0
        reply = pb_grpc.TranslatorStub(channel).Translate(pb.TranslateRequest(texts=[TEXT], model=MODEL_ID),
                                                          timeout=60)
    expected = host_translation(TEXT)
    assert reply.results[0].hypotheses[0].text == expected
    with triton_client(ctr.address(port)) as client:
        result = client.infer(MODEL_ID, [text_input([TEXT])]).as_numpy("TRANSLATION").tolist()
    assert result == [expected.encode()]
    assert Path(folder).name == folder  # a model folder of the repository, not a path
