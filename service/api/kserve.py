"""The KServe v2 / Triton `inference.GRPCInferenceService` servicer of the translation model.

Every call names a model of the repository (service/models/; "" is the one loaded model, a version
"" its latest): input TEXT (BYTES, [-1]) ->
output TRANSLATION (BYTES, same shape). Request parameters: `max_output_tokens` (or
`max_tokens`), `beam_size` and, for a many-to-many model, `source_language` / `target_language`
(strings), the controlled-decoding options of translator.v1 under the names of docs/api.md
(`target_prefix`, `min_output_tokens`, `repetition_penalty`, `suppress_sequences`, `temperature`,
`top_k`, `top_p`, `seed`, ...), with the limits and checks of the native API, and on ModelStreamInfer
`stream` (bool): one response per generated piece of text, then a final response; every
response of a stream carries `triton_final_response` (false on pieces, true on the last).
Tensors and parameters are decoded and encoded by service/api/kserve_codec.py; errors are domain
exceptions mapped by service/api/interceptor.py with the table of service/api/status.py (inside
ModelStreamInfer they travel as `error_message`, prefixed with the request id as Triton does,
and the stream goes on). ModelConfig reports the server's real batching settings and
ModelStatistics service/ops/statistics.py (service/api/kserve_model.py). A request with a TARGET
input beside TEXT is scored instead (service/api/kserve_score.py). The repository extension
(RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload) asks service/models/repository.py.
Responses name the model as the request did (Triton's answer, and what ModelMesh's clients see when
it routes by its own model ids, aliases of repository models), or the served model for "".
Shared-memory, trace and log RPCs answer UNIMPLEMENTED (from the generated base class).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from service.api import kserve_codec, kserve_model, kserve_parameters, kserve_score
from service.api.common import (
    MODEL_NAME,
    check_max_output_tokens,
    check_text_count,
    deadline_of,
    streams_pieces,
)
from service.api.status import status_of
from service.domain.errors import InvalidInput, UnknownModel
from service.domain.types import DecodeOptions, TokenEvent
from service.models.layout import ModelSettings
from service.models.repository import ModelRepository
from service.models.served import ServedModel

log = logging.getLogger(__name__)

MAX_ECHOED_ID_CHARS = 256  # a request id quoted in an in-stream error message
EXTENSIONS = ["parameters", "model_configuration", "statistics", "model_repository"]
LOAD_CONFIG_KEY = "config"  # RepositoryModelLoad: JSON settings over the model's own (Triton's `config`)


def server_version() -> str:
    """Version of this project's package, "unknown" when it is not installed."""
    try:
        return importlib.metadata.version("transformer-serving")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_repository(name: str) -> None:
    """UnknownModel unless `name` is "" (the server's one model repository)."""
    if name:
        raise UnknownModel(f"unknown model repository {kserve_codec.shown(name)}: this server has one, "
                           "named by the empty string")


def decode_options(options: kserve_parameters.InferOptions, max_len: int) -> DecodeOptions:
    """DecodeOptions from v2 request parameters, unset ones the model's default (the scheduler validates
    them, as for the native API)."""
    check_max_output_tokens(options.max_output_tokens, max_len, "parameter max_output_tokens/max_tokens")
    neutral = DecodeOptions()
    return DecodeOptions(
        beam_size=options.beam_size, max_new_tokens=options.max_output_tokens,
        source_language=options.source_language, target_language=options.target_language,
        alpha=options.length_penalty, target_prefix=options.target_prefix,
        min_length=options.min_output_tokens,
        max_length_ratio=_given(options.max_length_ratio, neutral.max_length_ratio),
        repetition_penalty=options.repetition_penalty, no_repeat_ngram_size=options.no_repeat_ngram_size,
        suppress_sequences=options.suppress_sequences, disable_unk=options.disable_unk,
        temperature=options.temperature, top_k=_given(options.top_k, neutral.top_k),
        top_p=_given(options.top_p, neutral.top_p), seed=options.seed,
    )


def _given(value: Any, default: Any) -> Any:
    """value, or default when it is None (not given)."""
    return default if value is None else value


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
    """inference.GRPCInferenceService on top of the model repository (each model its own scheduler)."""

    def __init__(self, models: ModelRepository, ready: Callable[[], bool], stream_slots: int = 256) -> None:
        """Serve the repository's models; `ready` reports the server's readiness; a stream runs at most
        `stream_slots` requests at once."""
        self.models, self._ready, self.stream_slots = models, ready, stream_slots

    async def ServerLive(  # noqa: N802 - gRPC method name
        self, request: pb.ServerLiveRequest, context: aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        """Live while the process answers."""
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(  # noqa: N802 - gRPC method name
        self, request: pb.ServerReadyRequest, context: aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        """Ready once the models to load at start are loaded and warmed up, until draining starts."""
        return pb.ServerReadyResponse(ready=self._ready())

    async def ModelReady(  # noqa: N802 - gRPC method name
        self, request: pb.ModelReadyRequest, context: aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        """Whether that model (version) is loaded and ready; NOT_FOUND for a model the repository lacks."""
        return pb.ModelReadyResponse(ready=self._ready() and self.models.ready(request.name, request.version))

    async def ServerMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ServerMetadataRequest, context: aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        """Server name, version and protocol extensions."""
        return pb.ServerMetadataResponse(name=MODEL_NAME, version=server_version(), extensions=EXTENSIONS)

    async def ModelMetadata(  # noqa: N802 - gRPC method name
        self, request: pb.ModelMetadataRequest, context: aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        """The model's loaded versions, platform and tensors."""
        async with self.models.use(request.name, request.version, deadline_of(context)) as model:
            versions = [m.version for m in self.models.loaded(model.name)] or [model.version]
            return pb.ModelMetadataResponse(
                name=request.name or model.name, versions=[str(v) for v in versions],
                platform=kserve_model.PLATFORM,
                inputs=[kserve_model.tensor(kserve_codec.INPUT_NAME)],
                outputs=[kserve_model.tensor(kserve_codec.OUTPUT_NAME)],
            )

    async def ModelConfig(  # noqa: N802 - gRPC method name
        self, request: pb.ModelConfigRequest, context: aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        """The Triton model configuration (see `model_config`)."""
        async with self.models.use(request.name, request.version, deadline_of(context)) as model:
            return pb.ModelConfigResponse(config=kserve_model.model_config(model))

    async def ModelStatistics(  # noqa: N802 - gRPC method name
        self, request: pb.ModelStatisticsRequest, context: aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        """Cumulative statistics of every loaded version of the model named ("" = of every model)."""
        if request.name:
            name, number = self.models.known(request.name, request.version)
            chosen = [m for m in self.models.loaded(name) if number in (None, m.version)]
        else:
            chosen = self.models.loaded()
        return pb.ModelStatisticsResponse(model_stats=[
            kserve_model.model_statistics(m.scheduler.recorder.stats.snapshot(), m.name, str(m.version))
            for m in chosen])  # by name and version (ModelRepository.loaded)

    async def RepositoryIndex(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryIndexRequest, context: aio.ServicerContext
    ) -> pb.RepositoryIndexResponse:
        """Every model of the repository with its state (only the ready ones if asked)."""
        check_repository(request.repository_name)
        entry = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(models=[
            entry(name=e.name, version=e.version, state=e.state.value, reason=e.reason)
            for e in self.models.index(ready_only=request.ready)])

    async def RepositoryModelLoad(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryModelLoadRequest, context: aio.ServicerContext
    ) -> pb.RepositoryModelLoadResponse:
        """Load (or reload, with no gap) a model; parameter `config`: JSON settings over its own."""
        check_repository(request.repository_name)
        settings = None
        for key, value in request.parameters.items():
            if key != LOAD_CONFIG_KEY or value.WhichOneof("parameter_choice") != "string_param":
                raise InvalidInput(f"unsupported load parameter {key!r}: only {LOAD_CONFIG_KEY!r} (a JSON "
                                   "string of model settings) is accepted")
            try:
                data = json.loads(value.string_param)
            except ValueError as exc:
                raise InvalidInput(f"load parameter {LOAD_CONFIG_KEY!r} is not JSON: {exc}") from exc
            settings = ModelSettings.from_json(data, f"load parameter {LOAD_CONFIG_KEY!r}")
        await self.models.load(request.model_name, settings)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(  # noqa: N802 - gRPC method name
        self, request: pb.RepositoryModelUnloadRequest, context: aio.ServicerContext
    ) -> pb.RepositoryModelUnloadResponse:
        """Unload a model: new requests are refused, in-flight ones complete."""
        check_repository(request.repository_name)
        await self.models.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    def _prepare(self, request: pb.ModelInferRequest, model: ServedModel
                 ) -> tuple[kserve_codec.DecodedRequest, DecodeOptions]:
        """Validate a request: tensor, text count and decoding options."""
        decoded = kserve_codec.decode_request(request)
        check_text_count(len(decoded.texts), model.scheduler.settings.max_batch_size)
        return decoded, decode_options(decoded.options, model.runner.max_len)

    @staticmethod
    def _response(model: ServedModel, name: str, request_id: str, texts: Sequence[str] | None,
                  final: bool | None = None) -> pb.ModelInferResponse:
        """A response with the TRANSLATION output (none if texts is None), flagged final or not if asked;
        `name`: the model name the request used ("" for the served model's)."""
        response = pb.ModelInferResponse(model_name=name or model.name, model_version=str(model.version),
                                         id=request_id)
        if texts is not None:
            kserve_codec.encode_translation_output(response, texts)
        if final is not None:
            kserve_codec.set_final(response, final)
        return response

    @staticmethod
    async def _translate(model: ServedModel, decoded: kserve_codec.DecodedRequest, options: DecodeOptions,
                         deadline: float | None) -> list[str]:
        """The best translation of every text of the request."""
        results = await model.scheduler.submit(decoded.texts, options, deadline)
        return [r.hypotheses[0].text for r in results]

    async def ModelInfer(  # noqa: N802 - gRPC method name
        self, request: pb.ModelInferRequest, context: aio.ServicerContext
    ) -> pb.ModelInferResponse:
        """Translate the TEXT tensor with the model named."""
        return await self.infer(request, deadline_of(context))

    @staticmethod
    async def _score(model: ServedModel, request: pb.ModelInferRequest, deadline: float | None,
                     final: bool | None = None) -> pb.ModelInferResponse:
        """The score outputs of a request with a TARGET input (service/api/kserve_score.py)."""
        sources, targets, options = kserve_score.decode_score_request(request)
        check_text_count(len(sources), model.scheduler.settings.max_batch_size)
        results = await model.scheduler.score(sources, targets, options, deadline)
        response = pb.ModelInferResponse(model_name=request.model_name or model.name,
                                         model_version=str(model.version), id=request.id)
        kserve_score.encode_score_outputs(response, results, kserve_score.wanted(request))
        if final is not None:
            kserve_codec.set_final(response, final)
        return response

    async def infer(self, request: pb.ModelInferRequest, deadline: float | None) -> pb.ModelInferResponse:
        """ModelInfer of any protocol (the HTTP server's infer and generate come here too)."""
        async with self.models.use(request.model_name, request.model_version, deadline) as model:
            if kserve_score.is_score(request):
                return await self._score(model, request, deadline)
            decoded, options = self._prepare(request, model)
            if decoded.options.stream:
                raise InvalidInput(f"parameter {kserve_parameters.STREAM_KEY} needs the ModelStreamInfer RPC "
                                   "(a unary call has a single response)")
            texts = await self._translate(model, decoded, options, deadline)
            return self._response(model, request.model_name, decoded.request_id, texts)

    async def stream_responses(self, request: pb.ModelInferRequest,
                                deadline: float | None) -> AsyncIterator[pb.ModelInferResponse]:
        """The responses of one request of a stream; the last one (only one unless streaming) is final.
        (The HTTP server's generate_stream reads them too.)"""
        async with self.models.use(request.model_name, request.model_version, deadline) as model:
            if kserve_score.is_score(request):
                yield await self._score(model, request, deadline, final=True)
                return
            decoded, options = self._prepare(request, model)
            request_id = decoded.request_id
            greedy = streams_pieces(options, model.scheduler.limits.defaults)
            if not decoded.options.stream or not greedy:  # a beam's best is only known at the end
                texts = await self._translate(model, decoded, options, deadline)
                yield self._response(model, request.model_name, request_id, texts, final=True)
                return
            if len(decoded.texts) != 1:
                raise InvalidInput(f"parameter {kserve_parameters.STREAM_KEY} streams one text per request "
                                   f"(input {kserve_codec.INPUT_NAME} shape [1]), got {len(decoded.texts)}")
            stream_options = dataclasses.replace(options, stream=True)
            async for event in model.scheduler.stream(decoded.texts[0], stream_options, deadline):
                if isinstance(event, TokenEvent):
                    if event.text:  # a token that completes no character adds no piece
                        yield self._response(model, request.model_name, request_id, [event.text], final=False)
                elif decoded.options.empty_final_response:
                    yield self._response(model, request.model_name, request_id, None, final=True)
                else:
                    text = event.hypotheses[0].text
                    yield self._response(model, request.model_name, request_id, [text], final=True)

    async def ModelStreamInfer(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: aio.ServicerContext
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests of the stream run concurrently; each response (or error) is sent when it is ready."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        deadline = deadline_of(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            """Run one request and queue its responses, or its error message."""
            try:
                async for response in self.stream_responses(request, deadline):
                    answers.put_nowait(pb.ModelStreamInferResponse(infer_response=response))
            except Exception as exc:  # noqa: BLE001 - errors travel inside the stream
                answers.put_nowait(stream_error(request, exc))

        async def read_all() -> None:
            """Start a task per request (at most queue_size at once), wait for all of them, mark the end."""
            tasks: set[asyncio.Task] = set()  # running ones only: a long-lived stream does not accumulate
            # a flood waits in HTTP/2 flow control
            slots = asyncio.Semaphore(self.stream_slots)

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
