"""The data every layer of the service passes on: options, requests, events, results, enums.

Plain dataclasses and enums, no I/O: the servicers build `DecodeOptions` from protobuf, the scheduler resolves
them once (`DecodeOptions.resolved` -> `ResolvedOptions`) into `Request`s, the runtime answers with
`TokenEvent` / `FinishedEvent`, and the scheduler hands `Result`s back.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.domain.options import DEFAULT_MAX_BEAM, DecodeOptions, ModelDefaults, ResolvedOptions

__all__ = [  # the options live in service/domain/options.py; every layer may import them from here
    "DEFAULT_MAX_BEAM", "BatchingMode", "DecodeOptions", "Event", "FinishReason", "FinishedEvent",
    "Hypothesis", "ModelDefaults", "Request", "ResolvedOptions", "Result", "ScoreOptions", "ScoreRequest",
    "ScoreResult",
    "Timings", "TokenEvent",
]

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
    unmet_phrases: tuple[int, ...] = ()  # indexes of the required phrases it lacks (no room for them)
    unmet_terms: tuple[str, ...] = ()  # source terms of the glossary terms it lacks (Result.glossary_terms)


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
    glossary_terms: tuple[str, ...] = ()  # source terms of the glossary terms the text holds (applied)


@dataclass(frozen=True)
class ScoreOptions:
    """How to score (source, target) pairs: languages by code (many-to-many models), the task whose prefix
    starts the sources (domain/tasks.py), alignment or not."""

    return_alignment: bool = False
    source_language: str | None = None
    target_language: str | None = None
    task: str | None = None

    @property
    def rows(self) -> int:
        """Rows of the batch a pair takes while it is scored (the scheduler's queue counts rows)."""
        return 1


@dataclass(eq=False)
class ScoreRequest:
    """One (source, target) pair to score by forced decoding (service/runtime/decoding/scoring.py): the source
    ids as the encoder reads them, the tokens fed after the decoder's start id but not scored (a many-to-many
    model's target language), and the tokens scored: the target's ids, then eos unless the target is as long
    as a translation cut at the model's maximum length (`end_token_scored` says which)."""

    source: list[int]
    forced: list[int]
    target: list[int]
    options: ScoreOptions = field(default_factory=ScoreOptions)
    end_token_scored: bool = True  # target ends with the eos score_requests appended
    tag: Any = None
    id: int = field(default_factory=lambda: next(_request_ids))


@dataclass
class ScoreResult:
    """A target's score given its source, by forced decoding: each scored token's log-prob (the end token
    included when it was scored, a forced target-language token never), their sum and their mean."""

    target_ids: list[int]  # the tokens scored: the target's ids, then eos when end_token_scored
    log_probs: list[float]  # log P(token | source, tokens before it), one per target_ids entry
    log_prob: float  # their sum
    score: float  # their mean: log_prob / len(target_ids)
    end_token_scored: bool  # eos was appended and scored (False: a target cut at the maximum length)
    source_ids: list[int]  # what the encoder read
    alignment: list[list[float]] | None  # (len(target_ids), len(source_ids)) cross-attention, when asked
    timings: Timings
