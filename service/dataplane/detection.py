"""Source language detection in the data plane: the /detect call's answer, and source_language "auto" of a
translation resolved to the model's code of each text's language, never a silent guess.

A detection under the confidence floor (the request's min_language_confidence, else the server's
--detect-min-confidence), or of a language the model does not translate from, is LanguageUndetermined naming
the language and its confidence. A model that takes no source language (one language pair, or languages given
only as a target) ignores "auto". Each detection the server acts on counts in
translator_detected_languages_total{model, language} (the model's code: its own list bounds the labels).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from service.domain.detection import (
    AUTO,
    TOP_ALTERNATIVES,
    Detection,
    check_floor,
    check_text,
    model_code,
)
from service.domain.errors import LanguageUndetermined
from service.domain.languages import Languages
from service.domain.types import DecodeOptions
from service.ops import metrics
from service.runtime import detector

R = TypeVar("R")


def detect(text: str, codes: Sequence[str] = (), top: int = TOP_ALTERNATIVES,
           where: str = "text") -> Detection:
    """A text's language: the best guess, the model's code of it among `codes` (none given: None) and up to
    `top` alternatives; InvalidInput for a text detection does not take."""
    check_text(text, where)
    best, *rest = detector.guesses(text, 1 + top)
    return Detection(best, model_code(best, codes, text) if codes else None, tuple(rest))


def floor_of(options: DecodeOptions, server_floor: float) -> float:
    """The confidence floor of a request: its min_language_confidence, else the server's."""
    asked = options.min_language_confidence
    return server_floor if asked is None else check_floor(asked)


def resolve(texts: Sequence[str], languages: Languages, floor: float, model: str) -> list[Detection]:
    """Each text's detection, all of them usable by the model (a model code at or above the floor), else
    LanguageUndetermined naming the first text that is not."""
    found = []
    for i, text in enumerate(texts):
        where = "text" if len(texts) == 1 else f"text {i}"
        detection = detect(text, languages.names, top=0, where=where)
        if detection.confidence < floor:
            raise LanguageUndetermined(
                f"source_language auto: {where} reads as {detection.shown()}, below the confidence floor "
                f"{floor:.2f} (min_language_confidence); set source_language to the text's language")
        if detection.model_code is None:
            raise LanguageUndetermined(
                f"source_language auto: {where} reads as {detection.shown()}, a language this model does not "
                f"translate from; set source_language to one of its {len(languages.codes)} languages")
        found.append(detection)
    for detection in found:
        metrics.DETECTED_LANGUAGES.labels(model=model, language=detection.model_code).inc()
    return found


def wanted(options: DecodeOptions, languages: Languages) -> bool:
    """Whether a request asks for detection its model uses (source_language auto, a model that takes one)."""
    return options.source_language == AUTO and languages.source_prefix


def unasked(options: DecodeOptions) -> DecodeOptions:
    """The options without "auto" (for a model that takes no source language)."""
    return dataclasses.replace(options, source_language=None) if options.source_language == AUTO else options


async def by_language(submit: Callable[[list[str], DecodeOptions], Awaitable[list[R]]], texts: Sequence[str],
                      options: DecodeOptions, detections: Sequence[Detection]) -> list[R]:
    """The results of `submit` for the texts in groups of one detected language (each group with that
    source_language), in text order."""
    groups: dict[str, list[int]] = {}
    for i, detection in enumerate(detections):
        groups.setdefault(str(detection.model_code), []).append(i)
    answers = await asyncio.gather(*(
        submit([texts[i] for i in indices], dataclasses.replace(options, source_language=code))
        for code, indices in groups.items()))
    results: list[R | None] = [None] * len(texts)
    for indices, answer in zip(groups.values(), answers, strict=True):
        for i, result in zip(indices, answer, strict=True):
            results[i] = result
    return [r for r in results if r is not None]
