"""The KServe v2 / Triton `inference.GRPCInferenceService` servicer of the translation model.

One model, `translator` (version "1"; "" means the served version): input TEXT (BYTES, [-1]) ->
output TRANSLATION (BYTES, same shape). Request parameters: `max_output_tokens` (or
`max_tokens`), `beam_size` and, for a many-to-many model, `source_language` / `target_language`
(strings), with the limits and checks of the native API, and on ModelStreamInfer
`stream` (bool): one response per generated piece of text, then a final response; every
response of a stream carries `triton_final_response` (false on pieces, true on the last).
Tensors and parameters are decoded and encoded by service/api/kserve_codec.py; errors are domain
exceptions mapped by service/api/interceptor.py with the table of service/api/status.py (inside
ModelStreamInfer they travel as `error_message`, prefixed with the request id as Triton does,
and the stream goes on). ModelConfig reports the server's real batching settings;
ModelStatistics reports service/ops/statistics.py. Repository, shared-memory, trace and log RPCs
answer UNIMPLEMENTED (from the generated base class).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
from grpc import aio

from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from protos.inference import model_config_pb2 as config_pb
from service.api import kserve_codec
from service.api.common import (
    MODEL_NAME,
    MODEL_VERSION,
    check_max_output_tokens,
    check_text_count,
    deadline_of,
)
from service.api.status import status_of
from service.domain.errors import InvalidInput, UnknownModel
from service.domain.types import BatchingMode, DecodeOptions, TokenEvent
from service.ops import statistics
from service.runtime.runner import Runner
from service.scheduling.scheduler import Scheduler

log = logging.getLogger(__name__)

PLATFORM = "onnxruntime_onnx"
MAX_ECHOED_ID_CHARS = 256  # a request id quoted in an in-stream error message
EXTENSIONS = ["parameters", "model_configuration", "statistics"]


def server_version() -> str:
    """Version of this project's package, "unknown" when it is not installed."""
    try:
        return importlib.metadata.version("transformer-serving")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_model(name: str, version: str) -> None:
    """UnknownModel unless the request names the served model and version ("" or "1")."""
    if name != MODEL_NAME:
        shown = kserve_codec.shown(name)
        raise UnknownModel(f"unknown model {shown}: this server serves only {MODEL_NAME!r}")
    if version not in ("", MODEL_VERSION):
        raise UnknownModel(
            f"model {MODEL_NAME!r} has no version {kserve_codec.shown(version)}: "
            f"the served version is {MODEL_VERSION!r}"
        )


def decode_options(options: kserve_codec.InferOptions, max_len: int) -> DecodeOptions:
    """DecodeOptions from v2 request parameters (the scheduler validates them, as for the native API)."""
    defaults = DecodeOptions()
    check_max_output_tokens(options.max_output_tokens, max_len, "parameter max_output_tokens/max_tokens")
    return DecodeOptions(
        beam_size=options.beam_size or defaults.beam_size,
        max_new_tokens=options.max_output_tokens or defaults.max_new_tokens,
        source_language=options.source_language, target_language=options.target_language,
    )


def _tensor(name: str) -> pb.ModelMetadataResponse.TensorMetadata:
    """Metadata of a 1-D BYTES tensor of any length."""
    metadata = pb.ModelMetadataResponse.TensorMetadata
    return metadata(name=name, datatype=kserve_codec.BYTES_DATATYPE, shape=[-1])


def model_config(runner: Runner, scheduler: Scheduler) -> config_pb.ModelConfig:
    """The Triton model configuration of `translator`, with the server's real batching settings.

    max_batch_size is 0, Triton's "the model batches by itself": a request's TEXT shape [N] is
    its full shape (no implicit batch dimension), so Triton tools send shape [N] tensors. The
    server's own batching is described by `dynamic_batching` (absent in mode none; max queue
    delay 0 in continuous mode, where texts join before any decoder step), its bounded queue by
    `default_queue_policy.max_queue_size` (in texts), and everything else in `parameters`.
    """
    text = config_pb.TYPE_STRING
    gpu = runner.provider.startswith("CUDA")
    config = config_pb.ModelConfig(
        name=MODEL_NAME, platform=PLATFORM, backend="onnxruntime", max_batch_size=0,
        version_policy=config_pb.ModelVersionPolicy(latest=config_pb.ModelVersionPolicy.Latest(num_versions=1)),
        input=[config_pb.ModelInput(name=kserve_codec.INPUT_NAME, data_type=text, dims=[-1])],
        output=[config_pb.ModelOutput(name=kserve_codec.OUTPUT_NAME, data_type=text, dims=[-1])],
        instance_group=[config_pb.ModelInstanceGroup(
            name=MODEL_NAME, count=1,
            kind=config_pb.ModelInstanceGroup.KIND_GPU if gpu else config_pb.ModelInstanceGroup.KIND_CPU)],
        model_transaction_policy=config_pb.ModelTransactionPolicy(decoupled=False),
    )
    settings = scheduler.settings
    if scheduler.mode != BatchingMode.NONE:
        batching = config.dynamic_batching
        if scheduler.mode == BatchingMode.DYNAMIC:
            batching.preferred_batch_size.append(settings.max_batch_size)
            batching.max_queue_delay_microseconds = round(settings.max_queue_delay_ms * 1000)
        batching.default_queue_policy.max_queue_size = settings.queue_size
    parameters = {
        "batching_mode": scheduler.mode.value, "max_batch_size": settings.max_batch_size,
        "max_texts_per_request": settings.max_batch_size, "max_batch_tokens": settings.max_batch_tokens,
        "max_queue_delay_ms": settings.max_queue_delay_ms,
        "queue_size": settings.queue_size, "max_beam_size": scheduler.limits.max_beam,
        "max_output_tokens": scheduler.limits.max_output_tokens,
        "max_source_tokens": scheduler.limits.max_source_tokens,
        "execution_provider": runner.provider, "variant": runner.variant_name,
        "stream_parameter": kserve_codec.STREAM_KEY,
    }
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    return config


def _duration(value: statistics.Duration) -> pb.StatisticDuration:
    """A StatisticDuration message."""
    return pb.StatisticDuration(count=value.count, ns=value.ns)


def model_statistics(snapshot: statistics.Snapshot) -> pb.ModelStatistics:
    """The ModelStatistics message of `translator` (definitions in service/ops/statistics.py)."""
    return pb.ModelStatistics(
        name=MODEL_NAME, version=MODEL_VERSION, last_inference=snapshot.last_inference_ms,
        inference_count=snapshot.inference_count, execution_count=snapshot.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(snapshot.success), fail=_duration(snapshot.fail),
            queue=_duration(snapshot.queue),
            compute_input=_duration(snapshot.compute_input), compute_infer=_duration(snapshot.compute_infer),
            compute_output=_duration(snapshot.compute_output),
        ),
        batch_stats=[pb.InferBatchStatistics(batch_size=size, compute_infer=_duration(runs))
                     for size, runs in sorted(snapshot.batches.items())],
    )


def stream_error(request: pb.ModelInferRequest, exc: BaseException) -> pb.ModelStreamInferResponse:
    """The in-stream answer to a failed request: Triton's "[request id: ...]" message, id echoed."""
    code, message = status_of(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("ModelStreamInfer request failed: %s", message, exc_info=exc)
    if request.id:
        message = f"[request id: {request.id[:MAX_ECHOED_ID_CHARS]}] {message}"
    response = pb.ModelInferResponse(model_name=request.model_name, model_version=request.model_version,
                                     id=request.id)
    kserve_codec.set_final(response, True)
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


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
        """The Triton model configuration (see `model_config`)."""
        check_model(request.name, request.version)
        return pb.ModelConfigResponse(config=model_config(self.runner, self.scheduler))

    async def ModelStatistics(  # noqa: N802 - gRPC method name
        self, request: pb.ModelStatisticsRequest, context: aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        """Cumulative statistics of the model ("" = every model, i.e. ours)."""
        if request.name or request.version:
            check_model(request.name, request.version)
        return pb.ModelStatisticsResponse(model_stats=[model_statistics(statistics.STATS.snapshot())])

    def _prepare(self, request: pb.ModelInferRequest) -> tuple[kserve_codec.DecodedRequest, DecodeOptions]:
        """Validate a request: model, tensor, text count and decoding options."""
        check_model(request.model_name, request.model_version)
        decoded = kserve_codec.decode_request(request)
        check_text_count(len(decoded.texts), self.scheduler.settings.max_batch_size)
        return decoded, decode_options(decoded.options, self.runner.max_len)

    def _response(self, request_id: str, texts: Sequence[str] | None,
                  final: bool | None = None) -> pb.ModelInferResponse:
        """A response with the TRANSLATION output (none if texts is None), flagged final or not if asked."""
        response = pb.ModelInferResponse(model_name=MODEL_NAME, model_version=MODEL_VERSION, id=request_id)
        if texts is not None:
            kserve_codec.encode_translation_output(response, texts)
        if final is not None:
            kserve_codec.set_final(response, final)
        return response

    async def _translate(self, decoded: kserve_codec.DecodedRequest, options: DecodeOptions,
                         deadline: float | None) -> list[str]:
        """The best translation of every text of the request."""
        results = await self.scheduler.submit(decoded.texts, options, deadline)
        return [r.hypotheses[0].text for r in results]

    async def ModelInfer(  # noqa: N802 - gRPC method name
        self, request: pb.ModelInferRequest, context: aio.ServicerContext
    ) -> pb.ModelInferResponse:
        """Translate the TEXT tensor."""
        decoded, options = self._prepare(request)
        if decoded.options.stream:
            raise InvalidInput(f"parameter {kserve_codec.STREAM_KEY} needs the ModelStreamInfer RPC "
                               "(a unary call has a single response)")
        texts = await self._translate(decoded, options, deadline_of(context))
        return self._response(decoded.request_id, texts)

    async def _stream_responses(self, request: pb.ModelInferRequest,
                                deadline: float | None) -> AsyncIterator[pb.ModelInferResponse]:
        """The responses of one request of a stream; the last one (only one unless streaming) is final."""
        decoded, options = self._prepare(request)
        request_id = decoded.request_id
        if not decoded.options.stream or options.beam_size > 1:  # a beam's best is only known at the end
            yield self._response(request_id, await self._translate(decoded, options, deadline), final=True)
            return
        if len(decoded.texts) != 1:
            raise InvalidInput(f"parameter {kserve_codec.STREAM_KEY} streams one text per request (input "
                               f"{kserve_codec.INPUT_NAME} shape [1]), got {len(decoded.texts)}")
        stream_options = dataclasses.replace(options, stream=True)
        async for event in self.scheduler.stream(decoded.texts[0], stream_options, deadline):
            if isinstance(event, TokenEvent):
                if event.text:  # a token that completes no character adds no piece
                    yield self._response(request_id, [event.text], final=False)
            elif decoded.options.empty_final_response:
                yield self._response(request_id, None, final=True)
            else:
                yield self._response(request_id, [event.hypotheses[0].text], final=True)

    async def ModelStreamInfer(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: aio.ServicerContext
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of the stream run concurrently; each response (or error) is sent when it is ready."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        deadline = deadline_of(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            """Run one request and queue its responses, or its error message."""
            try:
                async for response in self._stream_responses(request, deadline):
                    answers.put_nowait(pb.ModelStreamInferResponse(infer_response=response))
            except Exception as exc:  # noqa: BLE001 - errors travel inside the stream
                answers.put_nowait(stream_error(request, exc))

        async def read_all() -> None:
            """Start a task per request (at most queue_size at once), wait for all of them, mark the end."""
            tasks: set[asyncio.Task] = set()  # running ones only: a long-lived stream does not accumulate
            # a flood waits in HTTP/2 flow control
            slots = asyncio.Semaphore(self.scheduler.settings.queue_size)

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
                answers.put_nowait(None)

        reader = asyncio.create_task(read_all())
        try:
            while (item := await answers.get()) is not None:
                yield item
            await reader  # re-raises a failure of the request stream itself
        finally:
            reader.cancel()
