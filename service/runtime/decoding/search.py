"""Per-request search state: greedy and beam search over the rows of one request.

The algorithms are those of `model/decoding.py`, step for step, in float32 like PyTorch: a finished beam stays
in the beam with a frozen score and is only followed by padding, beams are ranked by log_prob / ((5 + len) /
6) ** alpha with len counting eos, and beam size 1 is greedy decoding. One search owns the `k` rows of one
request; `DecodeBatch` feeds it its rows of each decoder step's log-probs and reorders the KV cache rows by
the returned parents, after the bundle's rules (service/runtime/decoding/rules.py) made them what
transformers' processors make them: suppressed ids, a forced first token (a target language: every hypothesis
starts with it), eos forced as the last token max_output_tokens allows (`at_limit`). A hypothesis whose eos
was forced that way finishes for LENGTH: the limit ended it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from service.domain.types import FinishReason, ResolvedOptions
from service.runtime.decoding.topk import top


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha; alpha = 0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class RawHypothesis:
    """A finished beam before detokenization."""

    tokens: list[int]
    log_prob: float
    score: float
    finish_reason: FinishReason
    alignment: np.ndarray | None  # (len(tokens), src_len)
    unmet: tuple[int, ...] = ()  # required phrases it lacks (constrained_beam.py), by their index


class GreedySearch:
    """Argmax decoding of one request (one row).

    The batch picks the tokens of all its greedy rows at once and sums each row's log-probs in
    float32 (as PyTorch does), setting `log_prob` when the search ends; the search keeps the
    tokens and the alignment, and builds the result.
    """

    def __init__(self, options: ResolvedOptions, src_len: int, eos: int, eos_at_limit: bool = False) -> None:
        self.options, self.eos, self.src_len, self.eos_at_limit = options, eos, src_len, eos_at_limit
        self.tokens: list[int] = []  # generated, the final eos included
        self.log_prob = np.float32(0.0)
        self.attn: list[np.ndarray] | None = [] if options.return_alignment else None

    @property
    def finished(self) -> bool:
        """Stopped at eos."""
        return bool(self.tokens) and self.tokens[-1] == self.eos

    @property
    def done(self) -> bool:
        """Stopped at eos or at max_output_tokens."""
        return self.finished or len(self.tokens) >= self.options.max_output_tokens

    @property
    def at_limit(self) -> bool:
        """The next token is the last one max_output_tokens allows."""
        return len(self.tokens) == self.options.max_output_tokens - 1

    def advance(self, token: int, attn: np.ndarray | None = None) -> bool:
        """Consume the chosen token (and its cross-attention row (S,)); True when the search is done."""
        self.tokens.append(token)
        if self.attn is not None and attn is not None:
            self.attn.append(attn[: self.src_len].copy())
        return self.done

    def results(self) -> list[RawHypothesis]:
        """The single hypothesis."""
        n = len(self.tokens)  # generated tokens including eos if finished
        body = self.tokens[:-1] if self.finished else self.tokens
        lp = float(self.log_prob)
        align = None
        if self.attn is not None:
            rows = self.attn[: len(body)]
            align = np.stack(rows) if rows else np.zeros((0, self.src_len), np.float32)
        limited = not self.finished or (self.eos_at_limit and n == self.options.max_output_tokens)
        reason = FinishReason.LENGTH if limited else FinishReason.EOS
        return [RawHypothesis(body, lp, lp / length_penalty(n, self.options.length_penalty or 0.0), reason,
                              align)]


class BeamSearch:
    """Beam search over the k rows of one request, as `model.decoding.beam_search` does per source."""

    def __init__(self, options: ResolvedOptions, src_len: int, eos: int, pad: int,
                 eos_at_limit: bool = False) -> None:
        k, t = options.search_rows, options.max_output_tokens
        self.options, self.eos, self.pad, self.src_len, self.steps = options, eos, pad, src_len, 0
        self.eos_at_limit = eos_at_limit
        self.scores = np.full(k, -np.inf, np.float32)
        self.scores[0] = 0.0  # all beams start identical: keep one alive
        self.tokens = np.zeros((k, t), np.int64)
        self.finished = np.zeros(k, bool)
        self.lengths = np.zeros(k, np.int64)
        self.attn = np.zeros((k, t, src_len), np.float32) if options.return_alignment else None

    @property
    def done(self) -> bool:
        """All beams ended with eos, or max_output_tokens reached."""
        return bool(self.finished.all()) or self.steps >= self.options.max_output_tokens

    @property
    def at_limit(self) -> bool:
        """The next token is the last one max_output_tokens allows."""
        return self.steps == self.options.max_output_tokens - 1

    def advance(self, logp: np.ndarray, attn: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Consume logp (k, V) of this step; returns (parent beam of each new beam (k,), next tokens (k,))."""
        k, v = logp.shape
        logp = logp.astype(np.float32, copy=True)
        logp[self.finished] = -np.inf  # a finished beam can only be followed by padding, at no cost
        logp[self.finished, self.pad] = 0.0
        cand = (self.scores[:, None] + logp).reshape(-1)  # (K*V)
        best = top(cand, k)  # best first, ties by index
        parent, word = best // v, best % v
        self.scores = cand[best]
        return self._extend(parent, word, attn)

    def _extend(self, parent: np.ndarray, word: np.ndarray, attn: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Each new beam is beam `parent` + `word` (scores already set): tokens, lengths, finished and
        attention rows follow their parents; the step ends."""
        t = self.steps
        self.tokens[:, :t] = self.tokens[parent, :t]
        self.tokens[:, t] = word
        was_finished = self.finished[parent]
        self.lengths = self.lengths[parent] + ~was_finished
        self.finished = was_finished | (word == self.eos)
        if self.attn is not None and attn is not None:
            self.attn[:, :t] = self.attn[parent, :t]
            self.attn[:, t] = attn[parent, : self.src_len]
        self.steps += 1
        return parent, word

    def results(self) -> list[RawHypothesis]:
        """The n best beams, ranked by score."""
        hyps = self._rows()
        hyps.sort(key=lambda h: h.score, reverse=True)
        return hyps[: self.options.n_best]

    def _rows(self) -> list[RawHypothesis]:
        """Each row's hypothesis, in row order (a row with no valid token left out)."""
        hyps = []
        for j in range(len(self.scores)):
            log_prob = float(self.scores[j])
            if log_prob == -math.inf:
                continue
            n = int(self.lengths[j])  # generated tokens including eos if finished
            done = bool(self.finished[j])
            body = self.tokens[j, : n - 1 if done else n].tolist()
            align = self.attn[j, : len(body)].copy() if self.attn is not None else None
            score = log_prob / length_penalty(n, self.options.length_penalty or 0.0)
            limited = not done or (self.eos_at_limit and n == self.options.max_output_tokens)
            reason = FinishReason.LENGTH if limited else FinishReason.EOS
            hyps.append(RawHypothesis(body, log_prob, score, reason, align))
        return hyps


class AlternativesSearch(BeamSearch):
    """The n best continuations at the first position after the forced tokens (CTranslate2's
    return_alternatives): n rows, identical until that position, where row j takes the j-th most likely
    token; then each row goes on greedily. Hypotheses come in that order (the alternatives' rank)."""

    def __init__(self, options: ResolvedOptions, src_len: int, eos: int, pad: int,
                 eos_at_limit: bool = False) -> None:
        super().__init__(options, src_len, eos, pad, eos_at_limit)
        self.scores[:] = 0.0  # every row is its own hypothesis from the start
        self.branch = len(options.forced)

    def advance(self, logp: np.ndarray, attn: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Consume logp (n, V) of this step; returns (parent of each row: itself, next tokens (n,))."""
        n = len(self.scores)
        if self.steps == self.branch:  # the rows are identical here: row j takes the j-th best token
            ranked = np.argsort(-logp[0], kind="stable")[:n]
            word = ranked
        else:
            word = logp.argmax(axis=-1)
        word = np.where(self.finished, self.pad, word)
        chosen = logp[np.arange(n), word]
        self.scores = np.where(self.finished, self.scores, self.scores + chosen).astype(np.float32)
        t = self.steps
        self.tokens[:, t] = word
        self.lengths += ~self.finished
        if self.attn is not None and attn is not None:
            self.attn[:, t] = attn[:, : self.src_len]
        self.finished |= word == self.eos
        self.steps += 1
        return np.arange(n), word

    def results(self) -> list[RawHypothesis]:
        """One hypothesis per alternative, in the alternatives' order (those with no valid token left out)."""
        return self._rows()
