"""KServe ModelMesh's model-runtime interface (`mmesh.ModelRuntime`, protos/modelmesh/model_runtime.proto).

ModelMesh, in the same pod, places and evicts models through these calls (served only under
--modelmesh: service/server.py registers them then); they convert the wire to
the calls of service/models/mesh.py (ModelMesh's model ids as aliases of repository models) and
back. Errors are domain exceptions mapped by service/api/grpc/interceptor.py with service/api/status.py.
Inference reaches the runtime through the model-addressed unary calls listed in `runtimeStatus`'s
methodInfos (KServe v2 and translator.v1), where ModelMesh writes the model id into the request's
model-name field (`idInjectionPath`); streaming calls are not listed, as ModelMesh forwards no
streams. Their responses name the model by that id, as Triton's do behind ModelMesh (its adapter loads
each model into Triton under ModelMesh's id); the request metrics label them with the repository
model's name.
"""

from __future__ import annotations

from collections.abc import Callable

from grpc import aio

from protos.inference import grpc_service_pb2
from protos.modelmesh import model_runtime_pb2 as pb
from protos.modelmesh import model_runtime_pb2_grpc as pb_grpc
from protos.translator.v1 import translator_pb2
from service.dataplane.calls import server_version
from service.models.mesh import DEFAULT_MODEL_SIZE_BYTES, LOADING_TIMEOUT_MS, MeshModels

# (file, service, method, field of the request that names the model) of the calls ModelMesh forwards
ROUTED = (
    (grpc_service_pb2, "GRPCInferenceService", "ModelInfer", "model_name"),
    (grpc_service_pb2, "GRPCInferenceService", "ModelMetadata", "name"),
    (grpc_service_pb2, "GRPCInferenceService", "ModelReady", "name"),
    (grpc_service_pb2, "GRPCInferenceService", "ModelConfig", "name"),
    (grpc_service_pb2, "GRPCInferenceService", "ModelStatistics", "name"),
    (translator_pb2, "Translator", "Translate", "model"),
    (translator_pb2, "Translator", "GetModelInfo", "model"),
)
MAX_LOADING_CONCURRENCY = 1  # the repository loads one model at a time (memory is measured per load)


def method_infos() -> dict[str, list[int]]:
    """"package.Service/Method" -> the field-number path ModelMesh writes the model id to."""
    paths = {}
    for module, service_name, method_name, field in ROUTED:
        service = module.DESCRIPTOR.services_by_name[service_name]
        method = service.methods_by_name[method_name]
        paths[f"{service.full_name}/{method.name}"] = [method.input_type.fields_by_name[field].number]
    return paths


class ModelRuntimeServicer(pb_grpc.ModelRuntimeServicer):
    """mmesh.ModelRuntime on top of the model repository."""

    def __init__(self, mesh: MeshModels, ready: Callable[[], bool]) -> None:
        """ModelMesh's models in `mesh`; `ready` reports the server's readiness."""
        self.mesh, self._ready = mesh, ready

    async def loadModel(  # noqa: N802 - gRPC method name
        self, request: pb.LoadModelRequest, context: aio.ServicerContext
    ) -> pb.LoadModelResponse:
        """Load the model folder modelPath names under modelId; its measured size."""
        size = await self.mesh.load(request.modelId, request.modelPath)
        return pb.LoadModelResponse(sizeInBytes=size)

    async def unloadModel(  # noqa: N802 - gRPC method name
        self, request: pb.UnloadModelRequest, context: aio.ServicerContext
    ) -> pb.UnloadModelResponse:
        """Unload modelId once its model has closed (at once for an id not loaded)."""
        await self.mesh.unload(request.modelId)
        return pb.UnloadModelResponse()

    async def predictModelSize(  # noqa: N802 - gRPC method name
        self, request: pb.PredictModelSizeRequest, context: aio.ServicerContext
    ) -> pb.PredictModelSizeResponse:
        """The repository's estimate of the model at modelPath (no load)."""
        return pb.PredictModelSizeResponse(sizeInBytes=self.mesh.predict(request.modelPath))

    async def modelSize(  # noqa: N802 - gRPC method name
        self, request: pb.ModelSizeRequest, context: aio.ServicerContext
    ) -> pb.ModelSizeResponse:
        """Resident bytes of the loaded model of modelId."""
        return pb.ModelSizeResponse(sizeInBytes=self.mesh.size(request.modelId))

    async def runtimeStatus(  # noqa: N802 - gRPC method name
        self, request: pb.RuntimeStatusRequest, context: aio.ServicerContext
    ) -> pb.RuntimeStatusResponse:
        """STARTING until the server serves; then READY with the capacity and limits, having unloaded what
        ModelMesh's calls loaded (MeshModels.purge_shared), as the interface specifies."""
        if not self._ready():
            return pb.RuntimeStatusResponse(status=pb.RuntimeStatusResponse.STARTING)
        await self.mesh.purge_shared()
        response = pb.RuntimeStatusResponse(
            status=pb.RuntimeStatusResponse.READY, capacityInBytes=self.mesh.capacity(),
            maxLoadingConcurrency=MAX_LOADING_CONCURRENCY, modelLoadingTimeoutMs=LOADING_TIMEOUT_MS,
            defaultModelSizeInBytes=DEFAULT_MODEL_SIZE_BYTES, runtimeVersion=server_version(),
            allowAnyMethod=False, limitModelConcurrency=False)
        for method, path in method_infos().items():
            response.methodInfos[method].idInjectionPath.extend(path)
        return response
