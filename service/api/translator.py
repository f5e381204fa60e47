"""The translator.v1 servicer: protobuf <-> domain types around the scheduler, nothing more.

Errors are raised as domain exceptions (InvalidInput, QueueFull, ...) and mapped to gRPC statuses
by service/api/interceptor.py with the table of service/api/status.py; this module never chooses
a status code. Options are only converted here: the scheduler resolves and validates them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from grpc import aio

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.common import check_max_output_tokens, check_text_count, deadline_of, streams_pieces
from service.api.score import score
from service.domain.errors import InvalidInput
from service.domain.types import BatchingMode, DecodeOptions, FinishReason, Hypothesis, Result, TokenEvent
from service.models.repository import ModelRepository
from service.models.served import ServedModel
from service.runtime.runner import Runner

log = logging.getLogger(__name__)

FINISH_REASONS = {
    FinishReason.EOS: pb.FINISH_REASON_EOS,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.CANCELLED: pb.FINISH_REASON_CANCELLED,
}
BATCHING_MODES = {
    BatchingMode.NONE: pb.BATCHING_MODE_NONE,
    BatchingMode.DYNAMIC: pb.BATCHING_MODE_DYNAMIC,
    BatchingMode.CONTINUOUS: pb.BATCHING_MODE_CONTINUOUS,
}
_CONFIG_FIELDS = [f.name for f in pb.ModelConfig.DESCRIPTOR.fields]


def _optional(options: pb.TranslateOptions, name: str) -> Any:
    """An `optional` field's value, None when unset."""
    return getattr(options, name) if options.HasField(name) else None


def _prefix(options: pb.TranslateOptions) -> str | list[int] | None:
    """The target prefix as text or as ids (None: none); InvalidInput when both are given."""
    if options.target_prefix and options.target_prefix_ids:
        raise InvalidInput("give target_prefix (text) or target_prefix_ids, not both")
    if options.target_prefix_ids:
        return list(options.target_prefix_ids)
    return options.target_prefix or None


def decode_options(options: pb.TranslateOptions, max_len: int) -> DecodeOptions:
    """DecodeOptions from the request (zero or unset = the model's default); InvalidInput naming
    max_output_tokens when it is beyond the model's limit, or a target prefix given twice.

    Only conversion: DecodeOptions.resolved (in the scheduler) validates the values."""
    check_max_output_tokens(options.max_output_tokens or None, max_len)
    suppressed: list[str | list[int]] = [*options.suppress_sequences]
    suppressed += [list(s.ids) for s in options.suppress_sequence_ids]
    return DecodeOptions(
        beam_size=options.beam_size or None,
        n_best=options.n_best or 1,
        alpha=_optional(options, "length_penalty"),
        max_new_tokens=options.max_output_tokens or None,
        with_alignment=options.return_alignment,
        source_language=options.source_language or None,
        target_language=options.target_language or None,
        target_prefix=_prefix(options),
        return_alternatives=options.return_alternatives,
        min_length=_optional(options, "min_output_tokens"),
        max_length_ratio=options.max_length_ratio,
        repetition_penalty=_optional(options, "repetition_penalty"),
        no_repeat_ngram_size=_optional(options, "no_repeat_ngram_size"),
        suppress_sequences=tuple(suppressed),
        disable_unk=options.disable_unk,
        temperature=_optional(options, "temperature"),
        top_k=options.top_k,
        top_p=1.0 if not options.HasField("top_p") else options.top_p,
        seed=_optional(options, "seed"),
    )


def _tokens(runner: Runner, ids: list[int]) -> list[str]:
    """Vocabulary strings of token ids."""
    return [runner.tokenizer.token(i) for i in ids]


def hypothesis_message(hyp: Hypothesis, options: pb.TranslateOptions, runner: Runner,
                       cancelled: bool) -> pb.Hypothesis:
    """One Hypothesis message; optional fields filled as the options ask."""
    message = pb.Hypothesis(
        text=hyp.text, token_ids=hyp.tokens,
        finish_reason=FINISH_REASONS[FinishReason.CANCELLED if cancelled else hyp.finish_reason],
    )
    if options.return_tokens:
        message.tokens.extend(_tokens(runner, hyp.tokens))
    if options.return_scores:
        message.score, message.log_prob = hyp.score, hyp.log_prob
    if options.return_alignment and hyp.alignment is not None:
        message.alignment.extend(pb.AlignmentRow(weights=row) for row in hyp.alignment)  # (T, S)
    return message


def result_message(result: Result, options: pb.TranslateOptions, runner: Runner) -> pb.TranslationResult:
    """One TranslationResult message from a scheduler Result."""
    cancelled = result.finish_reason == FinishReason.CANCELLED
    message = pb.TranslationResult(
        hypotheses=[hypothesis_message(h, options, runner, cancelled) for h in result.hypotheses],
        timings=pb.Timings(queue_ms=result.timings.queue_ms, compute_ms=result.timings.compute_ms,
                           total_ms=result.timings.total_ms),
    )
    if options.return_alignment or options.return_tokens:
        message.source_token_ids.extend(result.source_ids)
    if options.return_tokens:
        message.source_tokens.extend(_tokens(runner, result.source_ids))
    return message


def model_info(model: ServedModel, name: str = "") -> pb.GetModelInfoResponse:
    """GetModelInfo answer: model config, bundle identity, providers, limits and defaults; named `name`
    (the name the request used, a ModelMesh id say) or the served model's."""
    runner, scheduler = model.runner, model.scheduler
    bundle = runner.bundle
    config: dict[str, Any] = {k: v for k, v in runner.config.items() if k in _CONFIG_FIELDS}
    files = bundle.manifest.get("files", {})
    source, target = runner.languages.example()  # a many-to-many model has no default pair
    defaults = scheduler.limits.resolve(DecodeOptions(source_language=source, target_language=target))
    settings = scheduler.settings
    return pb.GetModelInfoResponse(
        model_name=name or model.name,
        config=pb.ModelConfig(**config),
        bundle=pb.BundleInfo(
            version=bundle.version, format_version=bundle.format_version,
            files=[pb.FileHash(name=name, sha256=str(entry["sha256"]), size_bytes=int(entry["bytes"]))
                   for name, entry in sorted(files.items())],
        ),
        execution_providers=runner.providers,
        variant=runner.variant_name,
        languages=runner.languages.names,
        limits=pb.Limits(
            max_batch_size=settings.max_batch_size, max_source_tokens=scheduler.limits.max_source_tokens,
            max_beam_size=scheduler.limits.max_beam, max_output_tokens=scheduler.limits.max_output_tokens,
            batching_mode=BATCHING_MODES.get(scheduler.mode, pb.BATCHING_MODE_UNSPECIFIED),
            max_batch_tokens=settings.max_batch_tokens,
        ),
        defaults=pb.TranslateOptions(
            max_output_tokens=defaults.max_new_tokens, beam_size=defaults.beam_size, n_best=defaults.n_best,
            length_penalty=defaults.alpha, min_output_tokens=defaults.min_length,
            max_length_ratio=defaults.max_length_ratio, repetition_penalty=defaults.repetition_penalty,
            no_repeat_ngram_size=defaults.no_repeat_ngram_size, top_k=defaults.top_k, top_p=defaults.top_p,
        ),
    )


class TranslatorServicer(pb_grpc.TranslatorServicer):
    """translator.v1.Translator on top of the model repository (each model its own scheduler)."""

    def __init__(self, models: ModelRepository) -> None:
        """Serve the repository's models."""
        self.models = models

    async def Translate(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateRequest, context: aio.ServicerContext
    ) -> pb.TranslateResponse:
        """Translate every text of the request with the same options; results in request order."""
        request_id = request.request_id or uuid.uuid4().hex
        deadline = deadline_of(context)
        async with self.models.use(request.model, request.model_version, deadline) as model:
            texts = list(request.texts)
            check_text_count(len(texts), model.scheduler.settings.max_batch_size)
            options = decode_options(request.options, model.runner.max_len)
            log.debug("Translate %s: %d text(s) with %s", request_id, len(texts), model.name)
            results = await model.scheduler.submit(texts, options, deadline)
            return pb.TranslateResponse(
                results=[result_message(r, request.options, model.runner) for r in results],
                request_id=request_id)

    async def TranslateStream(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateStreamRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateStreamResponse]:
        """Pieces as they are generated (greedy), then the complete result."""
        request_id = request.request_id or uuid.uuid4().hex
        deadline = deadline_of(context)
        async with self.models.use(request.model, request.model_version, deadline) as model:
            runner, scheduler = model.runner, model.scheduler
            options = decode_options(request.options, runner.max_len)
            log.debug("TranslateStream %s with %s", request_id, model.name)
            if not streams_pieces(options, scheduler.limits.defaults):  # a beam's best is known at the end
                (result,) = await scheduler.submit([request.text], options, deadline)
                yield pb.TranslateStreamResponse(
                    result=result_message(result, request.options, runner), request_id=request_id)
                return
            index = 0
            async for event in scheduler.stream(request.text, replace(options, stream=True), deadline):
                if isinstance(event, TokenEvent):
                    token = runner.tokenizer.token(event.token)
                    piece = pb.TokenPiece(index=index, token_id=event.token, token=token, text=event.text)
                    index += 1
                    yield pb.TranslateStreamResponse(piece=piece, request_id=request_id)
                else:
                    yield pb.TranslateStreamResponse(
                        result=result_message(event, request.options, runner), request_id=request_id)

    async def Score(  # noqa: N802 - gRPC method name
        self, request: pb.ScoreRequest, context: aio.ServicerContext
    ) -> pb.ScoreResponse:
        """Score each target given its source (forced decoding): service/api/score.py."""
        return await score(self.models, request, context)

    async def GetModelInfo(  # noqa: N802 - gRPC method name
        self, request: pb.GetModelInfoRequest, context: aio.ServicerContext
    ) -> pb.GetModelInfoResponse:
        """The model's config, bundle, providers and limits (the one loaded model when none is named)."""
        async with self.models.use(request.model, request.model_version, deadline_of(context)) as model:
            return model_info(model, request.model)
