"""The KServe v2 / Triton `inference.GRPCInferenceService` servicer: protobuf <-> the calls of
service/dataplane/calls.py, nothing more.

Requests become plain KServe v2 data (service/dataplane/kserve.py: TEXT in, TRANSLATION out, or TARGET scored
given TEXT; parameters as plain values), answers and Triton's documents (metadata, model configuration,
statistics: service/dataplane/triton.py) go back as messages. Errors are domain exceptions mapped by
service/api/grpc/interceptor.py; inside ModelStreamInfer they travel as `error_message`, prefixed with the
request id as Triton does, and the stream goes on. Shared-memory, trace and log RPCs answer UNIMPLEMENTED
(from the generated base class).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message
from grpc import aio

from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from protos.inference import model_config_pb2 as config_pb
from service.api.grpc.context import deadline_of, grpc_status_of
from service.dataplane import kserve
from service.dataplane.calls import DataPlane

log = logging.getLogger(__name__)

MAX_ECHOED_ID_CHARS = 256  # a request id quoted in an in-stream error message
STREAM_ANSWERS = 64  # answers of a ModelStreamInfer call waiting for the client to read them, at most


def _value(parameter: Message) -> Any:
    """An InferParameter's (or ModelRepositoryParameter's) value; None when it holds none."""
    kind = parameter.WhichOneof("parameter_choice")
    return None if kind is None else getattr(parameter, kind)


def parameters_of(parameters: Any) -> dict[str, Any]:
    """A parameters map as plain values."""
    return {key: _value(value) for key, value in parameters.items()}


def infer_request(request: pb.ModelInferRequest) -> kserve.InferRequest:
    """The plain form of a ModelInferRequest."""
    raw = list(request.raw_input_contents)
    inputs = []
    for i, tensor in enumerate(request.inputs):
        typed = [descriptor.name for descriptor, _ in tensor.contents.ListFields()]
        inputs.append(kserve.Tensor(tensor.name, tensor.datatype, list(tensor.shape),
                                    raw=raw[i] if i < len(raw) else None,
                                    elements=list(tensor.contents.bytes_contents), typed=typed))
    return kserve.InferRequest(request.model_name, request.model_version, request.id, inputs,
                               [o.name for o in request.outputs], parameters_of(request.parameters), len(raw))


def infer_response(response: kserve.InferResponse) -> pb.ModelInferResponse:
    """The message of a plain InferResponse: outputs as raw contents."""
    message = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version,
                                    id=response.id)
    for output in response.outputs:
        message.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        message.raw_output_contents.append(output.raw())
    if response.final is not None:
        message.parameters[kserve.FINAL].bool_param = response.final
    for key, value in response.parameters.items():
        message.parameters[key].string_param = value
    return message


def stream_error(request: pb.ModelInferRequest, exc: BaseException) -> pb.ModelStreamInferResponse:
    """The in-stream answer to a failed request: Triton's "[request id: ...]" message, id echoed."""
    code, message = grpc_status_of(exc)
    if code.name == "INTERNAL":
        log.error("ModelStreamInfer request failed: %s", message, exc_info=exc)
    if request.id:
        message = f"[request id: {request.id[:MAX_ECHOED_ID_CHARS]}] {message}"
    response = infer_response(kserve.InferResponse(request.model_name, request.model_version, request.id,
                                                   final=True))
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """inference.GRPCInferenceService on the data plane."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    async def ServerLive(  # noqa: N802 - gRPC method name
        self, request: pb.ServerLiveRequest, context: aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        """Live while the process answers."""
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(  # noqa: N802 - gRPC method name
        self, request: pb.ServerReadyRequest, context: aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        """Ready once the models to load at start are loaded and warmed up, until draining starts."""
        return pb.ServerReadyResponse(ready=self.plane.ready())

    async def ModelReady(  # noqa: N802 - gRPC method name
        self, request: pb.ModelReadyRequest, context: aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        """Whether that model (version) is loaded and ready; NOT_FOUND for a model the repository lacks."""
        return pb.ModelReadyResponse(ready=self.plane.model_ready(request.name, request.version))

    async def ServerMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ServerMetadataRequest, context: aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        """Server name, version and protocol extensions."""
        return ParseDict(self.plane.server_metadata(), pb.ServerMetadataResponse())

    async def ModelMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ModelMetadataRequest, context: aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        """The model's loaded versions, platform and tensors."""
        document = await self.plane.model_metadata(request.name, request.version, deadline_of(context))
        return ParseDict(document, pb.ModelMetadataResponse())

    async def ModelConfig(  # noqa: N802 - gRPC method name
        self, request: pb.ModelConfigRequest, context: aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        """The Triton model configuration."""
        document = await self.plane.model_config(request.name, request.version, deadline_of(context))
        return pb.ModelConfigResponse(config=ParseDict(document, config_pb.ModelConfig()))

    async def ModelStatistics(  # noqa: N802 - gRPC method name
        self, request: pb.ModelStatisticsRequest, context: aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        """Cumulative statistics of every loaded version of the model named ("" = of every model)."""
        documents = self.plane.model_statistics(request.name, request.version)
        return ParseDict({"model_stats": documents}, pb.ModelStatisticsResponse())

    async def RepositoryIndex(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryIndexRequest, context: aio.ServicerContext
    ) -> pb.RepositoryIndexResponse:
        """Every model of the repository with its state (only the ready ones if asked)."""
        entry = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(models=[
            entry(name=e.name, version=e.version, state=e.state.value, reason=e.reason)
            for e in self.plane.index(request.repository_name, request.ready)])

    async def RepositoryModelLoad(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryModelLoadRequest, context: aio.ServicerContext
    ) -> pb.RepositoryModelLoadResponse:
        """Load (or reload, with no gap) a model; parameter `config`: JSON settings over its own."""
        await self.plane.load(request.model_name, parameters_of(request.parameters), request.repository_name)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryModelUnloadRequest, context: aio.ServicerContext
    ) -> pb.RepositoryModelUnloadResponse:
        """Unload a model: new requests are refused, in-flight ones complete."""
        await self.plane.unload(request.model_name, request.repository_name)
        return pb.RepositoryModelUnloadResponse()

    async def ModelInfer(  # noqa: N802 - gRPC method name
        self, request: pb.ModelInferRequest, context: aio.ServicerContext
    ) -> pb.ModelInferResponse:
        """Translate the TEXT tensor (or score TARGET given it) with the model named."""
        return infer_response(await self.plane.infer(infer_request(request), deadline_of(context)))

    async def ModelStreamInfer(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: aio.ServicerContext
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of the stream run concurrently; each response (or error) is sent when it is ready."""
        # bounded: a client that stops reading stops the requests' producers (backpressure), not memory
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue(STREAM_ANSWERS)
        deadline = deadline_of(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            """Run one request and queue its responses, or its error message."""
            try:
                async for response in self.plane.infer_stream(infer_request(request), deadline):
                    await answers.put(pb.ModelStreamInferResponse(infer_response=infer_response(response)))
            except Exception as exc:  # noqa: BLE001 - errors travel inside the stream
                await answers.put(stream_error(request, exc))

        async def read_all() -> None:
            """Start a task per request (at most stream_slots at once), wait for all of them, mark the end."""
            tasks: set[asyncio.Task] = set()  # running ones only: a long-lived stream does not accumulate
            slots = asyncio.Semaphore(self.plane.stream_slots)  # a flood waits in HTTP/2 flow control

            async def bounded(request: pb.ModelInferRequest) -> None:
                """answer() within a slot."""
                try:
                    await answer(request)
                finally:
                    slots.release()

            try:
                async for request in request_iterator:
                    await slots.acquire()
                    task = asyncio.create_task(bounded(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                current = asyncio.current_task()
                if current is None or not current.cancelling():  # cancelled: nobody reads the end mark
                    await answers.put(None)

        reader = asyncio.create_task(read_all())
        try:
            while (item := await answers.get()) is not None:
                yield item
            await reader  # re-raises a failure of the request stream itself
        finally:
            reader.cancel()
