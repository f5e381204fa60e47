"""The gRPC surface the server offers: which services it serves (by flags), the RPCs it implements and
counts, which of them name a model, and the one descriptor pool that server reflection reads."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_health.v1 import health, health_pb2

from protos.inference import grpc_service_pb2
from protos.modelmesh import model_runtime_pb2
from protos.translator.v1 import translator_pb2
from service.api.grpc.kserve import InferenceServicer
from service.api.grpc.modelmesh import ModelRuntimeServicer
from service.api.grpc.translator import TranslatorServicer

MODEL_RUNTIME = model_runtime_pb2.DESCRIPTOR.services_by_name["ModelRuntime"]  # served under --modelmesh
SERVICE_NAMES = (  # served whatever the flags
    translator_pb2.DESCRIPTOR.services_by_name["Translator"].full_name,
    grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name,
    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
)


def reflection_pool(files: Iterable[FileDescriptor]) -> descriptor_pool.DescriptorPool:
    """One descriptor pool holding `files` and their dependencies (our inference protos live in a
    private pool, the others in the default pool; reflection needs them all in one)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor) -> None:
        """Add a file after its dependencies, once."""
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        pool.AddSerializedFile(file.serialized_pb)
        added.add(file.name)

    for file in files:
        add(file)
    return pool


def service_names(modelmesh: bool = False) -> tuple[str, ...]:
    """The gRPC services served (health and reflection list them): ModelMesh's under --modelmesh only."""
    return (*SERVICE_NAMES, *([MODEL_RUNTIME.full_name] if modelmesh else []))


def counted_methods(modelmesh: bool = False) -> list[str]:
    """Metric labels of the RPCs the server implements ("translator.v1.Translator/Translate", ...);
    ModelMesh's under --modelmesh only."""
    implemented = [(translator_pb2.DESCRIPTOR.services_by_name["Translator"], TranslatorServicer),
                   (grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], InferenceServicer),
                   *([(MODEL_RUNTIME, ModelRuntimeServicer)] if modelmesh else []),
                   (health_pb2.DESCRIPTOR.services_by_name["Health"], health.aio.HealthServicer)]
    return [f"{service.full_name}/{method.name}" for service, servicer in implemented
            for method in service.methods if method.name in vars(servicer)]


MODEL_FIELDS = {"model", "model_name", "name", "modelId", "modelPath"}  # request fields that name a model


def model_methods(modelmesh: bool = False) -> list[str]:
    """The counted RPCs whose requests name a model: each loaded model version's series exist for them."""
    pools = [translator_pb2.DESCRIPTOR, grpc_service_pb2.DESCRIPTOR, model_runtime_pb2.DESCRIPTOR]
    services = [service for pool in pools for service in pool.services_by_name.values()]
    named = {f"{service.full_name}/{method.name}" for service in services for method in service.methods
             if MODEL_FIELDS & set(method.input_type.fields_by_name)}
    return [m for m in counted_methods(modelmesh) if m in named]
