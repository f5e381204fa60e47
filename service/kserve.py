"""The KServe v2 / Triton `inference.GRPCInferenceService` servicer of the translation model.

One model, `translator` (version "1"; "" means the served version): input TEXT (BYTES, [-1]) ->
output TRANSLATION (BYTES, same shape); request parameters `max_output_tokens` (or `max_tokens`)
and `beam_size` have the limits of the native API. Tensors are decoded and encoded by
service/kserve_codec.py; errors are domain exceptions mapped by service/interceptor.py (inside
ModelStreamInfer they travel as `error_message`, as Triton does). ModelStatistics is not
implemented (UNIMPLEMENTED, from the generated base class).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import AsyncIterator, Callable

from grpc import aio

from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from protos.inference import model_config_pb2 as config_pb
from service import kserve_codec
from service.errors import UnknownModel, status_of
from service.rpc import MODEL_NAME, MODEL_VERSION, check_max_output_tokens, check_text_count, deadline_of
from service.runner import Runner
from service.scheduler import Scheduler
from service.search import DecodeOptions

PLATFORM = "onnxruntime_onnx"
EXTENSIONS = ["parameters", "model_configuration"]


def server_version() -> str:
    """Version of this project's package, "unknown" when it is not installed."""
    try:
        return importlib.metadata.version("transformer-serving")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_model(name: str, version: str) -> None:
    """UnknownModel unless the request names the served model and version ("" or "1")."""
    if name != MODEL_NAME:
        raise UnknownModel(f"unknown model {name!r}: this server serves only {MODEL_NAME!r}")
    if version not in ("", MODEL_VERSION):
        raise UnknownModel(
            f"model {MODEL_NAME!r} has no version {version!r}: the served version is {MODEL_VERSION!r}"
        )


def decode_options(options: kserve_codec.InferOptions, runner: Runner) -> DecodeOptions:
    """DecodeOptions from v2 request parameters, validated like the native API's."""
    defaults = DecodeOptions()
    name = "parameter max_output_tokens/max_tokens"
    check_max_output_tokens(options.max_output_tokens, runner.max_len, name)
    decoded = DecodeOptions(
        beam_size=options.beam_size or defaults.beam_size,
        max_new_tokens=options.max_output_tokens or defaults.max_new_tokens,
    )
    decoded.resolved(runner.max_len, runner.max_beam)  # raises InvalidInput naming the bad value
    return decoded


def _tensor(name: str) -> pb.ModelMetadataResponse.TensorMetadata:
    """Metadata of a 1-D BYTES tensor of any length."""
    metadata = pb.ModelMetadataResponse.TensorMetadata
    return metadata(name=name, datatype=kserve_codec.BYTES_DATATYPE, shape=[-1])


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """inference.GRPCInferenceService on top of a Scheduler."""

    def __init__(self, runner: Runner, scheduler: Scheduler, ready: Callable[[], bool]) -> None:
        """Serve with this runner and scheduler; `ready` reports readiness."""
        self.runner, self.scheduler, self._ready = runner, scheduler, ready

    async def ServerLive(  # noqa: N802 - gRPC method name
        self, request: pb.ServerLiveRequest, context: aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        """Live while the process answers."""
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(  # noqa: N802 - gRPC method name
        self, request: pb.ServerReadyRequest, context: aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        """Ready once the model is loaded and warmed up, until draining starts."""
        return pb.ServerReadyResponse(ready=self._ready())

    async def ModelReady(  # noqa: N802 - gRPC method name
        self, request: pb.ModelReadyRequest, context: aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        """Readiness of the one served model; NOT_FOUND for any other."""
        check_model(request.name, request.version)
        return pb.ModelReadyResponse(ready=self._ready())

    async def ServerMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ServerMetadataRequest, context: aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        """Server name, version and protocol extensions."""
        return pb.ServerMetadataResponse(name=MODEL_NAME, version=server_version(), extensions=EXTENSIONS)

    async def ModelMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ModelMetadataRequest, context: aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        """The model's versions, platform and tensors."""
        check_model(request.name, request.version)
        return pb.ModelMetadataResponse(
            name=MODEL_NAME, versions=[MODEL_VERSION], platform=PLATFORM,
            inputs=[_tensor(kserve_codec.INPUT_NAME)], outputs=[_tensor(kserve_codec.OUTPUT_NAME)],
        )

    async def ModelConfig(  # noqa: N802 - gRPC method name
        self, request: pb.ModelConfigRequest, context: aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        """A Triton-style model configuration; our serving limits are in `parameters`."""
        check_model(request.name, request.version)
        bytes_type = config_pb.TYPE_STRING
        config = config_pb.ModelConfig(
            name=MODEL_NAME, platform=PLATFORM, backend="onnxruntime", max_batch_size=0,
            input=[config_pb.ModelInput(name=kserve_codec.INPUT_NAME, data_type=bytes_type, dims=[-1])],
            output=[config_pb.ModelOutput(name=kserve_codec.OUTPUT_NAME, data_type=bytes_type, dims=[-1])],
        )
        if self.scheduler.mode != "none":
            delay_us = int(self.scheduler.max_queue_delay_ms * 1000)
            config.dynamic_batching.max_queue_delay_microseconds = delay_us
        limits = {
            "batching_mode": self.scheduler.mode, "max_texts_per_request": self.scheduler.max_batch_size,
            "queue_size": self.scheduler.queue_size, "max_beam_size": self.runner.max_beam,
            "max_output_tokens": self.runner.max_len - 1, "max_source_tokens": self.runner.max_len,
            "execution_provider": self.runner.provider,
        }
        for key, value in limits.items():
            config.parameters[key].string_value = str(value)
        return pb.ModelConfigResponse(config=config)

    async def _infer(self, request: pb.ModelInferRequest, deadline: float | None) -> pb.ModelInferResponse:
        """Validate, translate and encode one inference request."""
        check_model(request.model_name, request.model_version)
        decoded = kserve_codec.decode_request(request)
        check_text_count(len(decoded.texts), self.scheduler.max_batch_size)
        options = decode_options(decoded.options, self.runner)
        results = await self.scheduler.submit(decoded.texts, options, deadline)
        response = pb.ModelInferResponse(
            model_name=MODEL_NAME, model_version=MODEL_VERSION, id=decoded.request_id)
        kserve_codec.encode_translation_output(response, [r.hypotheses[0].text for r in results])
        return response

    async def ModelInfer(  # noqa: N802 - gRPC method name
        self, request: pb.ModelInferRequest, context: aio.ServicerContext
    ) -> pb.ModelInferResponse:
        """Translate the TEXT tensor."""
        return await self._infer(request, deadline_of(context))

    async def ModelStreamInfer(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: aio.ServicerContext
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of the stream run concurrently; each answer (or error) is sent when it is ready."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        deadline = deadline_of(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            """Run one request and queue its response or its error message."""
            try:
                response = pb.ModelStreamInferResponse(infer_response=await self._infer(request, deadline))
            except Exception as exc:  # noqa: BLE001 - errors travel inside the stream
                response = pb.ModelStreamInferResponse(error_message=status_of(exc)[1])
            answers.put_nowait(response)

        async def read_all() -> None:
            """Start a task per request, wait for all of them, then mark the end."""
            tasks: list[asyncio.Task] = []
            try:
                async for request in request_iterator:
                    tasks.append(asyncio.create_task(answer(request)))
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                answers.put_nowait(None)

        reader = asyncio.create_task(read_all())
        try:
            while (item := await answers.get()) is not None:
                yield item
            await reader  # re-raises a failure of the request stream itself
        finally:
            reader.cancel()
