"""The data every layer of the service passes on: options, requests, events, results, enums.

Plain dataclasses and enums, no I/O: the servicers build `DecodeOptions` from protobuf, the
scheduler resolves them once (`DecodeOptions.resolved` -> `ResolvedOptions`) into `Request`s,
the runtime answers with `TokenEvent` / `FinishedEvent`, and the scheduler hands `Result`s back.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from service.domain.errors import InvalidInput
from service.domain.languages import Languages

DEFAULT_MAX_BEAM = 8  # the widest beam a server or a Runner accepts unless told otherwise

_request_ids = itertools.count(1)


class BatchingMode(StrEnum):
    """When queued texts join the decode batch (service/scheduling/policies.py)."""

    NONE = "none"
    DYNAMIC = "dynamic"
    CONTINUOUS = "continuous"


class FinishReason(StrEnum):
    """Why a hypothesis, or a text's result, ended."""

    EOS = "eos"
    LENGTH = "length"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode one request, as asked; max_new_tokens None means the model's limit (max_len - 1);
    languages by code, for many-to-many models only (service/domain/languages.py)."""

    beam_size: int = 1
    n_best: int = 1
    alpha: float = 0.0
    max_new_tokens: int | None = None
    with_alignment: bool = False
    stream: bool = False  # emit a TokenEvent per generated token (greedy only)
    source_language: str | None = None
    target_language: str | None = None

    def resolved(self, max_len: int, max_beam: int, languages: Languages | None = None) -> ResolvedOptions:
        """Validated copy with max_new_tokens filled in and the languages resolved to ids against the
        model's (None: a model without languages); raises InvalidInput on bad values."""
        limit = max_len - 1
        for name in ("beam_size", "n_best"):
            if not _is_int(getattr(self, name)):
                raise InvalidInput(f"{name} must be an integer, got {_shown(getattr(self, name))}")
        if not 1 <= self.beam_size <= max_beam:
            raise InvalidInput(f"beam_size must be between 1 and {max_beam}, got {_shown(self.beam_size)}")
        if not 1 <= self.n_best <= self.beam_size:
            raise InvalidInput(
                f"n_best must be between 1 and beam_size ({self.beam_size}), got {_shown(self.n_best)}"
            )
        if not _is_length_penalty(self.alpha):
            raise InvalidInput(
                f"alpha (length penalty) must be a finite number >= 0, got {_shown(self.alpha)}")
        steps = limit if self.max_new_tokens is None else self.max_new_tokens
        if not _is_int(steps) or not 1 <= steps <= limit:
            raise InvalidInput(
                f"max_new_tokens must be between 1 and {limit}, got {_shown(self.max_new_tokens)}")
        if self.stream and self.beam_size != 1:
            raise InvalidInput(f"streaming needs beam_size 1, got {self.beam_size}")
        prefix, forced = (languages or Languages()).resolve(self.source_language, self.target_language)
        return ResolvedOptions(int(self.beam_size), int(self.n_best), float(self.alpha), int(steps),
                               bool(self.with_alignment), bool(self.stream), self.source_language,
                               self.target_language, source_prefix=prefix, forced_first=forced)


@dataclass(frozen=True)
class ResolvedOptions(DecodeOptions):
    """DecodeOptions validated against a model's limits, max_new_tokens filled in, the languages as ids:
    the source's first ids and the first generated token (resolved once)."""

    max_new_tokens: int = 1
    source_prefix: tuple[int, ...] = ()  # ids before a source's pieces (its language)
    forced_first: int | None = None  # the first generated token (the target language), forced

    def resolved(self, max_len: int, max_beam: int, languages: Languages | None = None) -> ResolvedOptions:
        """Already resolved: itself."""
        return self


def _is_int(x: Any) -> bool:
    """True for ints (numpy included), False for bools and anything else."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _shown(x: Any, limit: int = 80) -> str:
    """repr() of an option value for a message, cut to `limit` characters; a huge int by its size
    (repr() refuses ints of over 4300 digits)."""
    if isinstance(x, int) and x.bit_length() > 4 * limit:
        return f"a {x.bit_length()}-bit integer"
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_length_penalty(x: Any) -> bool:
    """True for a finite real number >= 0 (numpy included); False for bools, ints too large for a
    float, and anything else."""
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        return False
    try:
        return math.isfinite(x) and x >= 0
    except OverflowError:
        return False


@dataclass(eq=False)
class Request:
    """One source to decode: ids (language prefix + tokenizer ids + suffix, usually eos), options, and an
    opaque caller tag."""

    source: list[int]
    options: DecodeOptions = field(default_factory=DecodeOptions)
    tag: Any = None
    id: int = field(default_factory=lambda: next(_request_ids))


@dataclass
class Hypothesis:
    """One result: tokens (no bos/eos), text, total log-prob, ranking score, why it stopped."""

    tokens: list[int]
    text: str
    log_prob: float
    score: float
    finish_reason: FinishReason
    alignment: list[list[float]] | None = None  # (len(tokens), src_len incl. eos)


@dataclass
class TokenEvent:
    """A greedy streaming request produced `token`; `text` is the newly decodable text ("" if none)."""

    request: Request
    token: int
    text: str


@dataclass
class FinishedEvent:
    """A request finished; its n-best hypotheses, best first."""

    request: Request
    hypotheses: list[Hypothesis]


Event = TokenEvent | FinishedEvent


@dataclass
class Timings:
    """Where a text's time went, in milliseconds: queued, being decoded, submit to result."""

    queue_ms: float
    compute_ms: float
    total_ms: float


@dataclass
class Result:
    """The outcome of one input text."""

    hypotheses: list[Hypothesis]  # n-best, best first (empty if cancelled)
    source_ids: list[int]  # what the encoder read: language prefix + tokenizer ids + suffix (eos)
    finish_reason: FinishReason  # of the best hypothesis, or CANCELLED
    timings: Timings
