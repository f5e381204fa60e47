"""The translator.v1 servicer: protobuf <-> the calls of service/dataplane/calls.py, nothing more.

Errors are domain exceptions, mapped to gRPC statuses by service/api/grpc/interceptor.py with the table of
service/api/status.py. Options are translator.v1's fields under the same names as everywhere inside; the
scheduler resolves and validates them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.grpc.context import deadline_of
from service.dataplane.calls import DataPlane, Final, ModelInfo, Opened
from service.dataplane.documents import DocumentStart
from service.dataplane.rendering import Hypothesis, Score, Translation, Want
from service.domain.detection import Detection
from service.domain.errors import InvalidInput
from service.domain.glossary import Glossary
from service.domain.types import BatchingMode, DecodeOptions, FinishReason, ScoreOptions

FINISH_REASONS = {FinishReason.EOS: pb.FINISH_REASON_EOS, FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
                  FinishReason.CANCELLED: pb.FINISH_REASON_CANCELLED}
BATCHING_MODES = {BatchingMode.NONE: pb.BATCHING_MODE_NONE, BatchingMode.DYNAMIC: pb.BATCHING_MODE_DYNAMIC,
                  BatchingMode.CONTINUOUS: pb.BATCHING_MODE_CONTINUOUS}
DOCUMENT_FORMATS = {pb.DOCUMENT_FORMAT_TEXT: "text", pb.DOCUMENT_FORMAT_HTML: "html",
                    pb.DOCUMENT_FORMAT_MARKDOWN: "markdown"}  # DocumentFormat -> service/documents' format
_CONFIG_FIELDS = [f.name for f in pb.ModelConfig.DESCRIPTOR.fields]
DEFAULTS = ("max_output_tokens", "beam_size", "n_best", "length_penalty", "min_output_tokens",
            "max_length_ratio",
            "repetition_penalty", "no_repeat_ngram_size", "top_k", "top_p")  # GetModelInfo's defaults


ZERO_IS_UNSET = ("beam_size", "max_output_tokens", "source_language", "target_language", "task")  # proto3 ""
SPECIAL = {"n_best", "target_prefix", "suppress_sequences", "required_phrases", "glossary"}


def _prefix(options: pb.TranslateOptions) -> str | list[int] | None:
    """The target prefix as text or as ids (None: none); InvalidInput when both are given."""
    if options.target_prefix and options.target_prefix_ids:
        raise InvalidInput("give target_prefix (text) or target_prefix_ids, not both")
    if options.target_prefix_ids:
        return list(options.target_prefix_ids)
    return options.target_prefix or None


def decode_options(options: pb.TranslateOptions) -> DecodeOptions:
    """DecodeOptions of the request's options, field by field of the same name: an `optional` field unset
    and a zero in ZERO_IS_UNSET are the model's default."""
    given: dict[str, Any] = {}
    for field in dataclasses.fields(DecodeOptions):
        name = field.name
        if name in SPECIAL or name not in pb.TranslateOptions.DESCRIPTOR.fields_by_name:
            continue
        if options.DESCRIPTOR.fields_by_name[name].has_presence:
            if options.HasField(name):
                given[name] = getattr(options, name)
        elif getattr(options, name) or name not in ZERO_IS_UNSET:
            given[name] = getattr(options, name)
    suppressed: list[str | list[int]] = [*options.suppress_sequences]
    suppressed += [list(s.ids) for s in options.suppress_sequence_ids]
    required = tuple([*p.texts, *(list(f.ids) for f in p.ids)] for p in options.required_phrases)
    glossary = Glossary.from_request([[t.source, list(t.targets)] for t in options.glossary])
    return DecodeOptions(**given, n_best=options.n_best or 1, target_prefix=_prefix(options),
                         suppress_sequences=tuple(suppressed), required_phrases=required, glossary=glossary)


def document_format(value: int) -> str:
    """The format name of a DocumentFormat; InvalidInput for UNSPECIFIED or an unknown number."""
    if value not in DOCUMENT_FORMATS:
        names = ", ".join(pb.DocumentFormat.Name(f) for f in DOCUMENT_FORMATS)
        given = pb.DocumentFormat.Name(value) if value in pb.DocumentFormat.values() else str(value)
        raise InvalidInput(f"format must be one of {names}, got {given}")
    return DOCUMENT_FORMATS[value]


def _want(options: pb.TranslateOptions | pb.ScoreOptions) -> Want:
    """What the options ask beside the text."""
    return Want(tokens=options.return_tokens, scores=getattr(options, "return_scores", False),
                alignment=options.return_alignment)


def _timings(t: Any) -> pb.Timings:
    return pb.Timings(queue_ms=t.queue_ms, compute_ms=t.compute_ms, total_ms=t.total_ms)


def _hypothesis(h: Hypothesis) -> pb.Hypothesis:
    """One Hypothesis message."""
    message = pb.Hypothesis(text=h.text, token_ids=h.token_ids, finish_reason=FINISH_REASONS[h.finish_reason],
                            tokens=h.tokens or [], unmet_required_phrases=h.unmet_required_phrases or [],
                            unmet_glossary_terms=h.unmet_glossary_terms or [])
    if h.score is not None:
        message.score, message.log_prob = h.score, h.log_prob
    if h.alignment is not None:
        message.alignment.extend(pb.AlignmentRow(weights=row) for row in h.alignment)  # (T, S)
    return message


def detected_message(d: Detection) -> pb.DetectedLanguage:
    """One DetectedLanguage message."""
    return pb.DetectedLanguage(
        best=pb.LanguageGuess(language=d.language, confidence=d.confidence),
        model_language=d.model_code or "",
        alternatives=[pb.LanguageGuess(language=g.language, confidence=g.confidence) for g in d.alternatives])


def result_message(t: Translation) -> pb.TranslationResult:
    """One TranslationResult message."""
    message = pb.TranslationResult(hypotheses=[_hypothesis(h) for h in t.hypotheses],
                                   timings=_timings(t.timings),
                                   source_token_ids=t.source_token_ids or [],
                                   source_tokens=t.source_tokens or [], glossary_terms=t.glossary_terms)
    if t.detected is not None:
        message.detected_language.CopyFrom(detected_message(t.detected))
    return message


def score_message(s: Score) -> pb.ScoreResult:
    """One ScoreResult message."""
    message = pb.ScoreResult(
        token_ids=s.token_ids, log_probs=s.log_probs, log_prob=s.log_prob, score=s.score,
        end_token_scored=s.end_token_scored, timings=_timings(s.timings), tokens=s.tokens or [],
        source_tokens=s.source_tokens or [], source_token_ids=s.source_token_ids or [])
    if s.alignment is not None:
        message.alignment.extend(pb.AlignmentRow(weights=row) for row in s.alignment)
    return message


def model_info(info: ModelInfo) -> pb.GetModelInfoResponse:
    """The GetModelInfo answer."""
    d = info.defaults
    return pb.GetModelInfoResponse(
        model_name=info.name, config=pb.ModelConfig(**{k: v for k,
                                                       v in info.config.items() if k in _CONFIG_FIELDS}),
        bundle=pb.BundleInfo(version=info.bundle_version, format_version=info.format_version,
                             files=[pb.FileHash(name=n, sha256=h, size_bytes=b) for n, h, b in info.files]),
        execution_providers=info.providers, variant=info.variant, languages=info.languages,
        limits=pb.Limits(**info.limits, batching_mode=BATCHING_MODES.get(info.batching_mode,
                                                                         pb.BATCHING_MODE_UNSPECIFIED)),
        defaults=pb.TranslateOptions(**{name: getattr(d, name) for name in DEFAULTS}),
        glossary_terms=info.glossary_terms, tasks=info.tasks, default_task=info.default_task or "")


class TranslatorServicer(pb_grpc.TranslatorServicer):
    """translator.v1.Translator on the data plane."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    async def Translate(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateRequest, context: aio.ServicerContext
    ) -> pb.TranslateResponse:
        """Translate every text of the request with the same options; results in request order."""
        answer = await self.plane.translate(request.model, request.model_version, list(request.texts),
                                            decode_options(request.options), _want(request.options),
                                            deadline_of(context))
        return pb.TranslateResponse(results=[result_message(r) for r in answer.results],
                                    request_id=request.request_id or uuid.uuid4().hex)

    async def TranslateStream(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateStreamRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateStreamResponse]:
        """Pieces as they are generated (greedy), then the complete result."""
        request_id = request.request_id or uuid.uuid4().hex
        items = self.plane.stream(request.model, request.model_version, request.text,
                                  decode_options(request.options), _want(request.options),
                                  deadline_of(context))
        async for item in items:
            if isinstance(item, Final):
                yield pb.TranslateStreamResponse(result=result_message(item.translation),
                                                 request_id=request_id)
            elif not isinstance(item, Opened):
                piece = pb.TokenPiece(index=item.index, token_id=item.token_id, token=item.token,
                                      text=item.text)
                yield pb.TranslateStreamResponse(piece=piece, request_id=request_id)

    async def Score(  # noqa: N802 - gRPC method name
        self, request: pb.ScoreRequest, context: aio.ServicerContext
    ) -> pb.ScoreResponse:
        """Score each target given its source (forced decoding); results in request order."""
        o = request.options
        options = ScoreOptions(return_alignment=o.return_alignment, source_language=o.source_language or None,
                               target_language=o.target_language or None, task=o.task or None)
        answer = await self.plane.score(request.model, request.model_version, list(request.sources),
                                        list(request.targets), options, _want(o), deadline_of(context))
        return pb.ScoreResponse(results=[score_message(r) for r in answer.results],
                                request_id=request.request_id or uuid.uuid4().hex)

    async def TranslateDocument(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateDocumentRequest, context: aio.ServicerContext
    ) -> pb.TranslateDocumentResponse:
        """The whole document translated, its markup and spacing in place."""
        fmt = document_format(request.format)
        answer = await self.plane.document(request.model, request.model_version, request.document, fmt,
                                           decode_options(request.options), list(request.protect),
                                           deadline_of(context))
        return pb.TranslateDocumentResponse(document=answer.text, segments=answer.segments,
                                            split_segments=answer.split, model=answer.model_name,
                                            model_version=answer.model_version,
                                            request_id=request.request_id or uuid.uuid4().hex)

    async def TranslateDocumentStream(  # noqa: N802 - gRPC method name
        self, request: pb.TranslateDocumentRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateDocumentStreamResponse]:
        """DocumentStart, then the translated document's parts in order, each as soon as it is final."""
        request_id = request.request_id or uuid.uuid4().hex
        fmt = document_format(request.format)
        items = self.plane.document_stream(request.model, request.model_version, request.document, fmt,
                                           decode_options(request.options), list(request.protect),
                                           deadline_of(context))
        async for item in items:
            if isinstance(item, DocumentStart):
                start = pb.DocumentStart(segments=item.segments, model=item.model_name,
                                         model_version=item.model_version)
                yield pb.TranslateDocumentStreamResponse(start=start, request_id=request_id)
            else:
                part = pb.DocumentPart(text=item.text, done=item.done, split=item.split)
                yield pb.TranslateDocumentStreamResponse(part=part, request_id=request_id)

    async def Detect(  # noqa: N802 - gRPC method name
        self, request: pb.DetectRequest, context: aio.ServicerContext
    ) -> pb.DetectResponse:
        """The text's language, with the named model's code of it."""
        name, version, found = await self.plane.detect(request.text, request.model, request.model_version,
                                                       deadline_of(context))
        return pb.DetectResponse(detected=detected_message(found), model=name, model_version=version)

    async def GetModelInfo(  # noqa: N802 - gRPC method name
        self, request: pb.GetModelInfoRequest, context: aio.ServicerContext
    ) -> pb.GetModelInfoResponse:
        """The model's config, bundle, providers and limits (the one loaded model when none is named)."""
        return model_info(await self.plane.model_info(request.model, request.model_version,
                                                      deadline_of(context)))
