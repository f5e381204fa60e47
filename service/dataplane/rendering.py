"""Results as every protocol shows them: the neutral fields (text, token ids, token strings, scores,
alignment) of a translation or a score, filled once, as the request asked; adapters only rename them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from service.domain.detection import Detection
from service.domain.types import FinishReason, Result, ScoreResult, Timings
from service.runtime.model.tokenization import TextTokenizer


@dataclass(frozen=True)
class Want:
    """What a request asks beside the text and token ids."""

    tokens: bool = False  # vocabulary strings of the target and source ids
    scores: bool = False  # a hypothesis's score and log-prob
    alignment: bool = False  # cross-attention rows over the source ids


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis as shown: None where not asked."""

    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    tokens: list[str] | None = None
    score: float | None = None
    log_prob: float | None = None
    alignment: list[list[float]] | None = None  # (len(token_ids), len(source ids))
    unmet_required_phrases: list[int] | None = None  # indexes of required phrases it lacks (None: none)
    unmet_glossary_terms: list[str] | None = None  # source terms of the glossary terms it lacks (None: none)


@dataclass(frozen=True)
class Translation:
    """One text's result as shown: hypotheses best first; the source ids with alignment or tokens."""

    hypotheses: list[Hypothesis]
    finish_reason: FinishReason
    timings: Timings
    source_token_ids: list[int] | None = None
    source_tokens: list[str] | None = None
    detected: Detection | None = None  # the source language detected (source_language auto)
    glossary_terms: list[str] = dataclasses.field(default_factory=list)  # source terms the text holds

    @property
    def text(self) -> str:
        """The best translation ("" when cancelled)."""
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def unmet(self) -> list[int]:
        """The required phrases the best translation lacks, by index."""
        return (self.hypotheses[0].unmet_required_phrases or []) if self.hypotheses else []

    @property
    def unmet_terms(self) -> list[str]:
        """The glossary terms (by source) the best translation lacks; all of them when cancelled."""
        if not self.hypotheses:
            return list(self.glossary_terms)
        return self.hypotheses[0].unmet_glossary_terms or []


@dataclass(frozen=True)
class Score:
    """One pair's score as shown: each scored token's log-prob, their sum and mean; None where not asked."""

    token_ids: list[int]
    log_probs: list[float]
    log_prob: float
    score: float
    end_token_scored: bool
    timings: Timings
    tokens: list[str] | None = None
    source_tokens: list[str] | None = None
    source_token_ids: list[int] | None = None
    alignment: list[list[float]] | None = None


@dataclass(frozen=True)
class Piece:
    """A generated token of a streamed translation: its position, id, vocabulary string and new text."""

    index: int
    token_id: int
    token: str
    text: str


def _strings(tokenizer: TextTokenizer, ids: list[int]) -> list[str]:
    """Vocabulary strings of token ids."""
    return [tokenizer.token(i) for i in ids]


def translation(result: Result, want: Want, tokenizer: TextTokenizer) -> Translation:
    """A scheduler Result as shown (a cancelled result's hypotheses say so)."""
    cancelled = result.finish_reason == FinishReason.CANCELLED
    hypotheses = [Hypothesis(
        text=h.text, token_ids=list(h.tokens),
        finish_reason=FinishReason.CANCELLED if cancelled else h.finish_reason,
        tokens=_strings(tokenizer, h.tokens) if want.tokens else None,
        score=h.score if want.scores else None, log_prob=h.log_prob if want.scores else None,
        alignment=h.alignment if want.alignment else None,
        unmet_required_phrases=list(h.unmet_phrases) or None,
        unmet_glossary_terms=list(h.unmet_terms) or None) for h in result.hypotheses]
    return Translation(
        hypotheses, result.finish_reason, result.timings,
        source_token_ids=list(result.source_ids) if want.alignment or want.tokens else None,
        source_tokens=_strings(tokenizer, result.source_ids) if want.tokens else None,
        glossary_terms=list(result.glossary_terms))


def score(result: ScoreResult, want: Want, tokenizer: TextTokenizer) -> Score:
    """A ScoreResult as shown."""
    return Score(
        token_ids=list(result.target_ids), log_probs=list(result.log_probs), log_prob=result.log_prob,
        score=result.score, end_token_scored=result.end_token_scored, timings=result.timings,
        tokens=_strings(tokenizer, result.target_ids) if want.tokens else None,
        source_tokens=_strings(tokenizer, result.source_ids) if want.tokens else None,
        source_token_ids=list(result.source_ids) if want.alignment or want.tokens else None,
        alignment=result.alignment if want.alignment else None)


def detected_fields(d: Detection) -> dict[str, Any]:
    """A detection as JSON fields: language, confidence, model_language (None: none) and alternatives."""
    return {"language": d.language, "confidence": d.confidence, "model_language": d.model_code,
            "alternatives": [{"language": g.language, "confidence": g.confidence} for g in d.alternatives]}
