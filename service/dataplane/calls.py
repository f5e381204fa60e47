"""The protocol-neutral call layer: every call a client can make, on the model repository and its
schedulers, in plain data. The wire adapters (service/api/) convert their requests to these calls and
the answers back, nothing more.

It owns the checks of counts (texts, pairs), deadlines (a gRPC deadline and Triton's `timeout`, the
earlier wins), which requests stream their pieces, and the results as shown (service/dataplane/rendering.py).
Errors are domain exceptions; service/api/status.py maps them to gRPC and HTTP statuses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from service.dataplane import detection, kserve, parameters, triton
from service.dataplane.document_calls import DocumentCalls
from service.dataplane.documents import DocumentLimits, document_parameters
from service.dataplane.rendering import Piece, Score, Translation, Want, score, translation
from service.dataplane.repository_calls import RepositoryCalls
from service.domain.detection import DEFAULT_MIN_CONFIDENCE, Detection
from service.domain.errors import InvalidInput, InvalidTensor
from service.domain.options import ResolvedOptions
from service.domain.types import BatchingMode, DecodeOptions, ModelDefaults, ScoreOptions, TokenEvent
from service.models.repository import ModelRepository
from service.models.served import ServedModel
from service.ops import metrics

T = TypeVar("T")


def server_version() -> str:
    """Version of this project's package, "unknown" when it is not installed."""
    try:
        return importlib.metadata.version("transformer-serving")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines given (None: none)."""
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def check_text_count(count: int, max_batch_size: int) -> None:
    """InvalidInput unless 1 <= count <= max_batch_size texts were sent."""
    if count < 1:
        raise InvalidInput("no texts to translate: send at least one text")
    if count > max_batch_size:
        raise InvalidInput(f"{count} texts in one request; this server accepts at most {max_batch_size} "
                           "(max_batch_size)")


def check_pair_count(sources: int, targets: int, max_batch_size: int) -> None:
    """InvalidInput unless 1 <= pairs <= max_batch_size and there are as many targets as sources."""
    if sources < 1:
        raise InvalidInput("no (source, target) pair to score: send at least one source and its target")
    if sources != targets:
        raise InvalidInput(f"{sources} source(s) but {targets} target(s): send one target per source")
    if sources > max_batch_size:
        raise InvalidInput(f"{sources} pairs in one request; this server accepts at most {max_batch_size} "
                           "(max_batch_size)")


def streams_pieces(options: DecodeOptions, defaults: ModelDefaults, holds_terms: bool = False) -> bool:
    """Whether a request can stream its pieces as generated: one hypothesis decoded greedily or by sampling
    (beam_size 1, the model's default when unset unless it samples, no alternatives, no required phrases
    or glossary, and a text holding none of the model's glossary terms: phrases are placed by beam search,
    known at the end)."""
    beam = (1 if options.sampling else defaults.beam_size) if options.beam_size is None else options.beam_size
    placed = options.required_phrases or options.glossary or (holds_terms and not options.sampling)
    return beam == 1 and not options.return_alternatives and not placed


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A call's results with the model that answered: its name as the request gave it (a ModelMesh id
    say; the served model's when none was given) and its version."""

    model_name: str
    model_version: str
    results: list[T]


@dataclass(frozen=True)
class Opened:
    """The start of a streamed translation: the model that answers it, named as the request named it, and
    the source language detected (source_language auto)."""

    model_name: str
    model_version: str
    detected: Detection | None = None


@dataclass(frozen=True)
class Final:
    """The end of a streamed translation: its result, and whether pieces were streamed before it."""

    translation: Translation
    streamed: bool


@dataclass(frozen=True)
class ModelInfo:
    """A served model as translator.v1's GetModelInfo describes it."""

    name: str
    config: dict[str, Any]
    bundle_version: str
    format_version: int
    files: list[tuple[str, str, int]]  # (name, sha256, bytes)
    providers: list[str]
    variant: str
    languages: list[str]
    limits: dict[str, int]
    batching_mode: BatchingMode
    defaults: ResolvedOptions
    glossary_terms: int = 0  # source terms of the model's own glossary
    tasks: list[str] = dataclasses.field(default_factory=list)  # task names a request may give (sorted)
    default_task: str | None = None  # the task of a request naming none


class DataPlane(DocumentCalls, RepositoryCalls):
    """Every call of every protocol on the repository's models (each model its own scheduler); the
    document calls are DocumentCalls', the repository's (index, load, unload) RepositoryCalls'."""

    def __init__(self, models: ModelRepository, ready: Callable[[], bool], stream_slots: int = 256,
                 documents: DocumentLimits | None = None,
                 min_language_confidence: float = DEFAULT_MIN_CONFIDENCE) -> None:
        """Serve the repository's models; `ready` reports the server's readiness; a KServe stream runs at
        most `stream_slots` requests at once; documents are taken up to `documents`; source_language auto
        refuses detections under `min_language_confidence`."""
        self.models, self._ready, self.stream_slots = models, ready, stream_slots
        self.documents = documents or DocumentLimits()
        self.min_language_confidence = min_language_confidence

    # ----- the server and its models ----------------------------------------------------------------
    def ready(self) -> bool:
        """Ready once the models to load at start serve, until draining starts."""
        return self._ready()

    def server_metadata(self) -> dict[str, Any]:
        """Server name, version and KServe v2 protocol extensions."""
        return {"name": triton.SERVER_NAME, "version": server_version(),
                "extensions": list(triton.EXTENSIONS)}

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether that model (version) is loaded and ready; UnknownModel for one the repository lacks."""
        return self._ready() and self.models.ready(name, version)

    async def model_metadata(self, name: str, version: str, deadline: float | None) -> dict[str, Any]:
        """KServe v2 model metadata of the model named."""
        async with self.models.use(name, version, deadline) as model:
            versions = [m.version for m in self.models.loaded(model.name)] or [model.version]
            return triton.metadata(model, name, versions)

    async def model_config(self, name: str, version: str, deadline: float | None) -> dict[str, Any]:
        """Triton's model configuration of the model named."""
        async with self.models.use(name, version, deadline) as model:
            return triton.model_config(model)

    def model_statistics(self, name: str, version: str) -> list[dict[str, Any]]:
        """Statistics of every loaded version of the model named ("" = of every model)."""
        if not name:
            return [triton.model_statistics(m) for m in self.models.loaded()]
        found, number = self.models.known(name, version)
        return [triton.model_statistics(m) for m in self.models.loaded(found) if number in (None, m.version)]

    async def model_info(self, name: str, version: str, deadline: float | None) -> ModelInfo:
        """The model's config, bundle, providers, limits and defaults (the one loaded model when none is
        named); named as the request named it."""
        async with self.models.use(name, version, deadline) as model:
            runner, scheduler, limits = model.runner, model.scheduler, model.scheduler.limits
            source, target = runner.languages.example()  # a many-to-many model has no default pair
            files = runner.bundle.manifest.get("files", {})
            return ModelInfo(
                name=name or model.name, config=dict(runner.config), bundle_version=runner.bundle.version,
                format_version=runner.bundle.format_version,
                files=[(f, str(e["sha256"]), int(e["bytes"])) for f, e in sorted(files.items())],
                providers=list(runner.providers), variant=runner.variant_name,
                languages=runner.languages.names,
                limits={"max_batch_size": scheduler.settings.max_batch_size,
                        "max_source_tokens": limits.max_source_tokens, "max_beam_size": limits.max_beam,
                        "max_output_tokens": limits.max_output_tokens,
                        "max_batch_tokens": scheduler.settings.max_batch_tokens},
                batching_mode=scheduler.mode,
                defaults=limits.resolve(DecodeOptions(source_language=source, target_language=target)),
                glossary_terms=len(limits.glossary), tasks=limits.tasks.names,
                default_task=limits.tasks.default)

    # ----- language detection ---------------------------------------------------------------------
    async def detect(self, text: str, name: str = "", version: str = "",
                     deadline: float | None = None) -> tuple[str, str, Detection]:
        """A text's language with its alternatives (model name and version "" when none is named); with a
        model, its code of the language too (None: the model lacks it) and the model's text limit."""
        if not name:
            found = detection.detect(text)
            metrics.DETECTED_LANGUAGES.labels(model=metrics.NO_MODEL, language=found.language).inc()
            return "", "", found
        async with self.models.use(name, version, deadline) as model:
            model.scheduler.limits.check_texts([text])
            found = detection.detect(text, model.runner.languages.names)
            if found.model_code is not None:
                metrics.DETECTED_LANGUAGES.labels(model=model.name, language=found.model_code).inc()
            return name, str(model.version), found

    def _detected(self, model: ServedModel, texts: Sequence[str],
                  options: DecodeOptions) -> tuple[DecodeOptions, list[Detection] | None]:
        """The options as submitted and each text's detection (None: no detection asked or used)."""
        languages = model.runner.languages
        if not detection.wanted(options, languages):
            return detection.unasked(options), None
        model.scheduler.limits.check_texts(texts)
        floor = detection.floor_of(options, self.min_language_confidence)
        return options, detection.resolve(texts, languages, floor, model.name)

    # ----- translation and scoring ----------------------------------------------------------------
    async def translate(self, name: str, version: str, texts: Sequence[str], options: DecodeOptions,
                        want: Want, deadline: float | None) -> Answer[Translation]:
        """Translate every text with the same options (source_language auto: each text's detected one);
        results in order."""
        async with self.models.use(name, version, deadline) as model:
            check_text_count(len(texts), model.scheduler.settings.max_batch_size)
            options, found = self._detected(model, texts, options)

            async def submit(some: list[str], asked: DecodeOptions) -> list:
                return await model.scheduler.submit(some, asked, deadline)

            results = await (submit(list(texts), options) if found is None
                             else detection.by_language(submit, texts, options, found))
            tokenizer = model.runner.tokenizer
            shown = [translation(r, want, tokenizer) for r in results]
            if found is not None:
                shown = [dataclasses.replace(t, detected=d) for t, d in zip(shown, found, strict=True)]
            return Answer(name or model.name, str(model.version), shown)

    async def stream(self, name: str, version: str, text: str, options: DecodeOptions, want: Want,
                     deadline: float | None) -> AsyncIterator[Opened | Piece | Final]:
        """Opened, then a Piece per generated token as it comes (greedy decoding or sampling), then the Final
        result; a beam's best is only known at the end: then the Final alone."""
        async with self.models.use(name, version, deadline) as model:
            scheduler, tokenizer = model.scheduler, model.runner.tokenizer
            options, found = self._detected(model, [text], options)
            detected = None if found is None else found[0]
            if detected is not None:
                options = dataclasses.replace(options, source_language=detected.model_code)
            yield Opened(name or model.name, str(model.version), detected)
            holds_terms = isinstance(text, str) and bool(scheduler.limits.glossary.matches(text))
            if not streams_pieces(options, scheduler.limits.defaults, holds_terms):
                (result,) = await scheduler.submit([text], options, deadline)
                yield Final(dataclasses.replace(translation(result, want, tokenizer), detected=detected),
                            streamed=False)
                return
            index = 0
            async for event in scheduler.stream(text, dataclasses.replace(options, stream=True), deadline):
                if isinstance(event, TokenEvent):
                    yield Piece(index, event.token, tokenizer.token(event.token), event.text)
                    index += 1
                else:
                    yield Final(dataclasses.replace(translation(event, want, tokenizer), detected=detected),
                                streamed=True)

    async def score(self, name: str, version: str, sources: Sequence[str], targets: Sequence[str],
                    options: ScoreOptions, want: Want, deadline: float | None) -> Answer[Score]:
        """Score each target given its source (forced decoding); results in pair order."""
        async with self.models.use(name, version, deadline) as model:
            check_pair_count(len(sources), len(targets), model.scheduler.settings.max_batch_size)
            results = await model.scheduler.score(list(sources), list(targets), options, deadline)
            tokenizer = model.runner.tokenizer
            return Answer(name or model.name, str(model.version), [score(r, want,
                                                                         tokenizer) for r in results])

    # ----- KServe v2 inference ------------------------------------------------------------------------
    async def infer(self, request: kserve.InferRequest, deadline: float | None) -> kserve.InferResponse:
        """A KServe v2 inference: translate TEXT, or score TARGET given TEXT."""
        if request.scores:
            return await self._score_tensors(request, deadline)
        if (document := document_parameters(request.parameters)) is not None:
            return await self._documents(request, *document, deadline)
        texts, asked = kserve_translation(request, self.models.ceilings.max_batch_size)
        if asked.stream:
            raise InvalidInput(f"parameter {parameters.STREAM} needs the ModelStreamInfer RPC (a unary call "
                               "has a single response)")
        answer = await self.translate(request.model, request.version, texts, asked.options, Want(),
                                      earliest(deadline, asked.deadline))
        return kserve.translation_response(request, answer.model_name, answer.model_version, answer.results,
                                           bool(asked.options.required_phrases))

    async def _documents(self, request: kserve.InferRequest, fmt: str, protect: list[str],
                         given: dict[str, Any], deadline: float | None) -> kserve.InferResponse:
        """A KServe v2 request whose TEXT elements are documents (parameter `format`): one output each."""
        texts = kserve.translation_texts(request, self.models.ceilings.max_batch_size)
        asked = parameters.read(given, stream=True)
        if asked.stream:
            raise InvalidInput(f"parameter {parameters.STREAM} with a document format: a document comes back "
                               "whole")
        deadline = earliest(deadline, asked.deadline)
        answers = await asyncio.gather(*(
            self.document(request.model, request.version, text, fmt, asked.options, protect, deadline)
            for text in texts))
        return kserve.InferResponse(answers[0].model_name, answers[0].model_version, request.id,
                                    [kserve.translation_output([a.text for a in answers])])

    async def infer_stream(self, request: kserve.InferRequest,
                           deadline: float | None) -> AsyncIterator[kserve.InferResponse]:
        """The responses of one request of a KServe v2 stream; the last one (the only one unless it streams
        pieces) is final."""
        if request.scores:
            yield dataclasses.replace(await self._score_tensors(request, deadline), final=True)
            return
        if (document := document_parameters(request.parameters)) is not None:
            yield dataclasses.replace(await self._documents(request, *document, deadline), final=True)
            return
        texts, asked = kserve_translation(request, self.models.ceilings.max_batch_size)
        deadline = earliest(deadline, asked.deadline)
        if not asked.stream:
            answer = await self.translate(request.model, request.version, texts, asked.options, Want(),
                                          deadline)
            required = bool(asked.options.required_phrases)
            yield kserve.translation_response(request, answer.model_name, answer.model_version,
                                              answer.results, required, final=True)
            return
        if len(texts) != 1:
            raise InvalidInput(f"parameter {parameters.STREAM} streams one text per request (input "
                               f"{kserve.INPUT} shape [1]), got {len(texts)}")
        name, number = request.model, request.version
        async for item in self.stream(request.model, request.version, texts[0], asked.options, Want(),
                                      deadline):
            if isinstance(item, Opened):
                name, number = item.model_name, item.model_version
            elif isinstance(item, Piece):
                if item.text:  # a token that completes no character adds no piece
                    yield kserve.InferResponse(name, number, request.id,
                                               [kserve.translation_output([item.text])],
                                               final=False)
            elif item.streamed and asked.empty_final_response:
                yield kserve.InferResponse(name, number, request.id, final=True)
            else:  # required phrases stream no pieces: the whole result, with its unmet phrases
                yield kserve.translation_response(request, name, number, [item.translation],
                                                  bool(asked.options.required_phrases), final=True)

    async def _score_tensors(self, request: kserve.InferRequest,
                             deadline: float | None) -> kserve.InferResponse:
        """The score outputs of a request with a TARGET input."""
        sources, targets = kserve.score_pairs(request, self.models.ceilings.max_batch_size)
        options = parameters.score_options(request.parameters, where=f"scoring (a {kserve.TARGET} input)")
        timeout = request.parameters.get(parameters.TIMEOUT)
        deadline = earliest(deadline, None if timeout is None else parameters.deadline_of(timeout))
        answer = await self.score(request.model, request.version, sources, targets, options, Want(), deadline)
        return kserve.InferResponse(answer.model_name, answer.model_version, request.id,
                                    kserve.score_outputs(answer.results, request.outputs))


def kserve_translation(request: kserve.InferRequest, most: int | None = None
                       ) -> tuple[list[str], parameters.Asked]:
    """The texts (at most `most`: the server's max_batch_size, checked before the data is split) and options
    of a KServe v2 translation request."""
    texts = kserve.translation_texts(request, most)
    for name in ("n_best", "return_alternatives"):
        if name in request.parameters:
            raise InvalidTensor(f"parameter {name} is not offered here: the {kserve.OUTPUT} output holds "
                                "one translation per text (translator.v1 Translate returns several)")
    return texts, parameters.read(request.parameters, stream=True)
