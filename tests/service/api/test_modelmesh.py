"""KServe ModelMesh's model-runtime interface (mmesh.ModelRuntime) of a server of a model repository, through
a plain stub of its .proto: served only under --modelmesh, status (a purge on every READY answer), loads
and sizes by ModelMesh's model ids (never one that shadows a repository model), inference by those ids
through KServe v2 and translator.v1, unloads, paths outside the repository; and the ServingRuntime
manifest (deploy/kubernetes/modelmesh/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import tritonclient.grpc as triton
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from tritonclient.grpc import service_pb2 as triton_service

from protos.modelmesh import model_runtime_pb2 as mm
from protos.modelmesh import model_runtime_pb2_grpc as mm_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.config import _FLAGS, env_name, parse_config
from service.dataplane.calls import server_version
from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_tokens
from tests.support.deploy import K8S
from tests.support.kserve import text_input, triton_client
from tests.support.server import server_config

TEXT = "we 5"
BUDGET = 3 * 2**30
MODEL_ID = "en-de__isvc-0123456789"  # ModelMesh Serving's ids: <InferenceService>__isvc-<hash>
RUNTIME = K8S / "modelmesh" / "servingruntime.yaml"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_bundle: Path) -> Path:
    """DIR/en-de/1 (the tiny bundle), and DIR/escape, a link to a folder outside the repository."""
    root = tmp_path_factory.mktemp("repository")
    (root / "en-de").mkdir()
    (root / "en-de" / "1").symlink_to(tiny_bundle, target_is_directory=True)
    outside = tmp_path_factory.mktemp("outside")
    (outside / "1").symlink_to(tiny_bundle, target_is_directory=True)
    (root / "escape").symlink_to(outside, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def server(repository: Path, tiny_bundle: Path) -> Iterator[BackgroundServer]:
    """Control mode explicit, nothing loaded at start, a memory budget, --modelmesh: as under ModelMesh."""
    config = server_config(tiny_bundle, model_repository=repository, model_control_mode="explicit",
                           memory_budget=BUDGET, modelmesh=True)
    with BackgroundServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    """A channel to `server`."""
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def mesh(channel: grpc.Channel) -> mm_grpc.ModelRuntimeStub:
    """What ModelMesh calls."""
    return mm_grpc.ModelRuntimeStub(channel)


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[triton.InferenceServerClient]:
    """tritonclient.grpc, unchanged (ModelMesh forwards ModelInfer with the model id as model_name)."""
    with triton_client(server.address) as c:
        yield c


def refused(call, request) -> grpc.RpcError:
    """The error of a call that must fail."""
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=60)
    return err.value


def translation(client: triton.InferenceServerClient, model: str) -> list[bytes]:
    """TEXT translated by the model `model` through KServe v2 ModelInfer."""
    return client.infer(model, [text_input([TEXT])]).as_numpy("TRANSLATION").tolist()


def test_runtime_status_is_ready_with_capacity_limits_and_routes(mesh):
    status = mesh.runtimeStatus(mm.RuntimeStatusRequest(), timeout=60)
    assert status.status == mm.RuntimeStatusResponse.READY
    assert status.capacityInBytes == BUDGET
    assert status.maxLoadingConcurrency == 1
    assert status.modelLoadingTimeoutMs > 0 and status.defaultModelSizeInBytes > 0
    assert status.runtimeVersion == server_version() and status.runtimeVersion
    assert not status.allowAnyMethod and not status.limitModelConcurrency
    model_name = triton_service.ModelInferRequest.DESCRIPTOR.fields_by_name["model_name"].number
    routes = {method: list(info.idInjectionPath) for method, info in status.methodInfos.items()}
    assert routes["inference.GRPCInferenceService/ModelInfer"] == [model_name] == [1]
    assert routes["translator.v1.Translator/Translate"] == [pb.TranslateRequest.DESCRIPTOR.fields_by_name[
        "model"].number]
    assert not any("Stream" in method for method in routes)  # ModelMesh forwards no streams


def test_load_infer_size_and_unload_by_model_id(mesh, client, channel, server, repository, tiny_bundle,
                                                 runner: Runner):
    files = sum(p.stat().st_size for p in tiny_bundle.rglob("*") if p.is_file())
    predicted = mesh.predictModelSize(mm.PredictModelSizeRequest(modelId=MODEL_ID, modelPath="en-de"))
    assert predicted.sizeInBytes == files
    loaded = mesh.loadModel(mm.LoadModelRequest(modelId=MODEL_ID, modelType="translator-bundle",
                                                modelPath="en-de", modelKey="{}"), timeout=120)
    assert loaded.sizeInBytes > 0
    assert mesh.modelSize(mm.ModelSizeRequest(modelId=MODEL_ID)).sizeInBytes == loaded.sizeInBytes
    expected = runner.tokenizer.decode(best_tokens(runner, TEXT, DecodeOptions()))
    assert translation(client, MODEL_ID) == [expected.encode()]
    assert client.is_model_ready(MODEL_ID)
    reply = pb_grpc.TranslatorStub(channel).Translate(pb.TranslateRequest(texts=[TEXT], model=MODEL_ID))
    assert reply.results[0].hypotheses[0].text == expected
    # a second id of the same folder (absolute path, trailing slash) shares the loaded model
    loads = metrics.counter_value(metrics.MODEL_LOADS, result="ok")
    mesh.loadModel(mm.LoadModelRequest(modelId="second", modelPath=f"{repository}/en-de/"), timeout=120)
    assert metrics.counter_value(metrics.MODEL_LOADS, result="ok") == loads
    mesh.unloadModel(mm.UnloadModelRequest(modelId=MODEL_ID), timeout=60)
    assert translation(client, "second") == [expected.encode()]  # still loaded for the other id
    error = refused(mesh.modelSize, mm.ModelSizeRequest(modelId=MODEL_ID))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    mesh.unloadModel(mm.UnloadModelRequest(modelId="second"), timeout=60)
    assert not server.running.models.loaded()
    for model_id in (MODEL_ID, "second"):
        with pytest.raises(triton.InferenceServerException) as err:
            translation(client, model_id)
        assert err.value.status() == "StatusCode.NOT_FOUND" and "unknown model" in err.value.message()
    mesh.unloadModel(mm.UnloadModelRequest(modelId=MODEL_ID), timeout=60)  # unknown: no error


def test_responses_echo_the_model_id_and_metrics_name_the_repository_model(mesh, client, channel):
    """As Triton behind ModelMesh (which knows models by ModelMesh's ids), responses name the model by the
    id the request used; the request metrics label the repository model, never the id."""
    infer = "inference.GRPCInferenceService/ModelInfer"
    before = metrics.counter_value(metrics.REQUESTS, method=infer, code="OK", model="en-de", version="1")
    mesh.loadModel(mm.LoadModelRequest(modelId=MODEL_ID, modelPath="en-de"), timeout=120)
    try:
        response = client.infer(MODEL_ID, [text_input([TEXT])]).get_response()
        assert (response.model_name, response.model_version) == (MODEL_ID, "1")
        assert client.get_model_metadata(MODEL_ID).name == MODEL_ID
        stub = pb_grpc.TranslatorStub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(model=MODEL_ID), timeout=60)
        assert info.model_name == MODEL_ID
    finally:
        mesh.unloadModel(mm.UnloadModelRequest(modelId=MODEL_ID), timeout=60)
    after = metrics.counter_value(metrics.REQUESTS, method=infer, code="OK", model="en-de", version="1")
    assert after == before + 1
    labelled = {s.labels["model"] for family in metrics.REQUESTS.collect() for s in family.samples}
    assert "en-de" in labelled and MODEL_ID not in labelled


def test_every_ready_runtime_status_unloads_what_modelmesh_had_loaded(repository, tiny_bundle):
    """ModelMesh asks at its start (again after it restarts) and expects a runtime that holds none of its
    models: a READY status unloads them, as the model-runtime interface specifies."""
    config = server_config(tiny_bundle, model_repository=repository, model_control_mode="explicit",
                           modelmesh=True)
    with BackgroundServer(config) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = mm_grpc.ModelRuntimeStub(channel)
        ready = mm.RuntimeStatusResponse.READY
        for model_id in ("before-status", "after-restart"):
            stub.loadModel(mm.LoadModelRequest(modelId=model_id, modelPath="en-de"), timeout=120)
            assert srv.running.models.loaded()
            assert stub.runtimeStatus(mm.RuntimeStatusRequest(), timeout=60).status == ready
            assert not srv.running.models.loaded()
            error = refused(stub.modelSize, mm.ModelSizeRequest(modelId=model_id))
            assert error.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("model_id", "reason"), [("escape", "is the name of a model of the repository"),
                                                  ("a/b", "is not a valid model name"),
                                                  ("", "modelId is empty")])
def test_an_id_that_would_shadow_a_repository_model_is_refused(mesh, server, model_id, reason):
    error = refused(mesh.loadModel, mm.LoadModelRequest(modelId=model_id, modelPath="en-de"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and reason in error.details(), error.details()
    assert repr(model_id) in error.details() or not model_id
    assert not server.running.models.loaded() and "escape" not in server.running.models.aliases


@pytest.mark.parametrize("path", ["", "/", "..", "../en-de", "/etc", "/etc/passwd", "en-de/../../x",
                                  "escape", "en-de/1", "en-de/1/bundle.json"])
def test_paths_outside_the_repository_or_not_a_model_folder_are_refused(mesh, server, repository, path):
    for candidate in {path, f"{repository}/{path}" if path and not path.startswith("/") else path}:
        for call, request in ((mesh.loadModel, mm.LoadModelRequest(modelId="x", modelPath=candidate)),
                              (mesh.predictModelSize, mm.PredictModelSizeRequest(modelPath=candidate))):
            error = refused(call, request)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (candidate, error.details())
    assert not server.running.models.loaded()


def test_unknown_models_are_not_found(mesh):
    calls = ((mesh.loadModel, mm.LoadModelRequest(modelId="x", modelPath="nope"), "nope"),
             (mesh.predictModelSize, mm.PredictModelSizeRequest(modelPath="nope"), "nope"),
             (mesh.modelSize, mm.ModelSizeRequest(modelId="never-loaded"), "never-loaded"))
    for call, request, named in calls:
        error = refused(call, request)
        assert error.code() == grpc.StatusCode.NOT_FOUND and named in error.details(), error.details()
    mesh.unloadModel(mm.UnloadModelRequest(modelId="x"), timeout=60)


def test_control_mode_none_refuses_modelmesh_loads(tiny_bundle, runner: Runner):
    request = mm.LoadModelRequest(modelId="x", modelPath="translator")
    config = server_config(tiny_bundle, modelmesh=True)
    with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as c:
        error = refused(mm_grpc.ModelRuntimeStub(c).loadModel, request)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "'none'" in error.details()


def test_without_the_flag_modelmesh_is_not_served(tiny_bundle, repository, runner: Runner):
    """Without --modelmesh every mmesh.ModelRuntime RPC is UNIMPLEMENTED (not registered), and neither
    reflection nor health knows the service; with it, both do."""
    calls = {"runtimeStatus": mm.RuntimeStatusRequest(), "loadModel": mm.LoadModelRequest(modelId="x",
             modelPath="en-de"), "unloadModel": mm.UnloadModelRequest(modelId="x"),
             "predictModelSize": mm.PredictModelSizeRequest(modelPath="en-de"),
             "modelSize": mm.ModelSizeRequest(modelId="x")}
    assert set(calls) == set(mm.DESCRIPTOR.services_by_name["ModelRuntime"].methods_by_name)
    for flag in (False, True):
        config = server_config(tiny_bundle, model_repository=repository, model_control_mode="explicit",
                               modelmesh=flag)
        with BackgroundServer(config, runner) as srv, grpc.insecure_channel(srv.address) as channel:
            listed = "mmesh.ModelRuntime" in ProtoReflectionDescriptorDatabase(channel).get_services()
            health = health_pb2_grpc.HealthStub(channel)
            if flag:
                assert listed and health.Check(health_pb2.HealthCheckRequest(service="mmesh.ModelRuntime"))
                continue
            assert not listed
            error = refused(health.Check, health_pb2.HealthCheckRequest(service="mmesh.ModelRuntime"))
            assert error.code() == grpc.StatusCode.NOT_FOUND
            stub = mm_grpc.ModelRuntimeStub(channel)
            for method, request in calls.items():
                error = refused(getattr(stub, method), request)
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED, method
            assert not srv.running.models.loaded() and not srv.running.models.aliases


# ----- the ServingRuntime manifest --------------------------------------------------------------------
def runtime() -> dict[str, Any]:
    """The ServingRuntime of deploy/kubernetes/modelmesh/servingruntime.yaml."""
    (doc,) = [d for d in yaml.safe_load_all(RUNTIME.read_text()) if d]
    return doc


def test_serving_runtime_runs_the_server_on_the_ports_modelmesh_calls():
    doc = runtime()
    assert (doc["apiVersion"], doc["kind"]) == ("serving.kserve.io/v1alpha1", "ServingRuntime")
    spec = doc["spec"]
    assert spec["multiModel"] is True and spec["storageHelper"]["disabled"] is True
    (container,) = spec["containers"]
    assert container["command"] == ["python", "-m", "service.server"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert set(env) <= {env_name(flag) for flag, _, _ in _FLAGS}
    config = parse_config(container["args"], env)  # what the server reads from this container
    assert config.model_control_mode == "explicit" and config.memory_budget > 0
    assert config.modelmesh  # the interface ModelMesh calls is served only when asked
    assert config.host == "0.0.0.0"
    assert spec["grpcEndpoint"] == spec["grpcDataEndpoint"] == f"port:{config.port}"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[str(config.model_repository)] in {v["name"] for v in spec["volumes"]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime"},
           "spec": {"containers": [container], "volumes": spec["volumes"]}}
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    (isvc,) = [d for d in yaml.safe_load_all((RUNTIME.parent / "inferenceservice.yaml").read_text()) if d]
    model = isvc["spec"]["predictor"]["model"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "ModelMesh"
    assert model["runtime"] == doc["metadata"]["name"] and model["modelFormat"]["name"] in formats
    assert "/" not in model["storage"]["path"]  # a model folder of the repository
