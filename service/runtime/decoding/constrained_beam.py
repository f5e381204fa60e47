"""Lexically constrained beam search: every hypothesis holds the request's required phrases, unless
max_output_tokens leaves no room for them (then the hypothesis says which it lacks).

Dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam
Allocation"), over the request's k rows, on the beam search of service/runtime/decoding/search.py (a finished
beam stays in the beam with a frozen score; GNMT's length penalty, or transformers' for a bundle whose search
is transformers'). Each step:

1. a row that has not met every phrase may not end (eos is -inf for it), except at the last step
   max_output_tokens allows; a row whose remaining room is no more than the tokens its unmet phrases
   still need (constraints.py `needed`) may only take tokens that lower that need, when one of them is
   possible (not -inf): phrases that fit are then always placed;
2. candidates: the k best continuations over all rows, each row's best token, and each row's tokens that
   continue or start an unmet phrase (its constraint tokens), -inf ones left out;
3. each candidate's bank is its progress (tokens of the phrases placed, constraints.py); the k rows are
   dealt out over the banks in stripes, as fairseq's LexicallyConstrainedBeamSearch does: the best of every
   bank first (the better scores first among them), then the second best of every bank, and so on, so that
   every level of progress keeps a share of the beam and banks with too few candidates leave their share
   to the others.

A finished row's only candidate is itself (padding at no cost), in its bank. The hypotheses are ranked
with those that met every phrase first, then by score; with a beam wide enough to keep every candidate the
search is exhaustive. The search ends when every row has ended, or when n_best rows ended holding every
phrase and no live row can reach their scores (its log-prob only falls; the most favourable length penalty
it may still end with), so rows of lower banks, which may not end, do not run to max_output_tokens. With
beam_size 1 the stripe is the best candidate: the greedy token unless a phrase must be placed now (as
`needed` counts, phrases not overlapping). Candidates' progress, banks and stripes are computed for all of
them at once (constraints.py), no Python per candidate. An output that already holds its phrases is kept by
the plain search beside this one (plain_first.py).
"""

from __future__ import annotations

import numpy as np

from service.domain.types import ResolvedOptions
from service.runtime.decoding.constraints import Tracker
from service.runtime.decoding.search import BeamSearch, RawHypothesis
from service.runtime.decoding.topk import top


class ConstrainedBeamSearch(BeamSearch):
    """Beam search of one request's k rows that places its required phrases (module doc)."""

    def __init__(self, options: ResolvedOptions, src_len: int, eos: int, pad: int,
                 eos_at_limit: bool = False, *, transformers_penalty: bool = False) -> None:
        super().__init__(options, src_len, eos, pad, eos_at_limit)
        self.tracker = Tracker(options.required_phrases)
        self.states, self.met = self.tracker.start(len(self.scores))
        self.transformers_penalty = transformers_penalty

    @property
    def done(self) -> bool:
        """All beams ended, max_output_tokens reached, or no live beam can rank among the n best any more:
        n_best beams ended holding every phrase, each scoring above the best any live beam could reach (its
        log-prob only falls; over the most favourable length penalty of the lengths it may still end at)."""
        if super().done:
            return True
        scored = self.scores > -np.inf
        ended = self.finished & scored & self.met.all(axis=1)
        if np.count_nonzero(ended) < self.options.n_best:
            return False
        log_prob = self.scores.astype(np.float64)
        nth = np.sort(log_prob[ended] / self._penalty(self.lengths[ended]))[-self.options.n_best]
        live = ~self.finished & scored
        soonest, latest = self._penalty(self.lengths[live] + 1), self._penalty(self.options.max_output_tokens)
        reach = np.maximum(log_prob[live] / soonest, log_prob[live] / latest)
        return bool((reach < nth).all())

    def _penalty(self, n: np.ndarray | int) -> np.ndarray:
        """The length penalty that divides the log-prob of a hypothesis of n tokens (eos included) in its
        score: GNMT's, or transformers' n ** length_penalty (module doc)."""
        n = np.asarray(n, np.float64)
        given = self.options.length_penalty
        if self.transformers_penalty:
            return np.maximum(n, 1.0) ** (1.0 if given is None else given)
        return ((5.0 + n) / 6.0) ** (given or 0.0)

    def advance(self, logp: np.ndarray, attn: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Consume logp (k, V) of this step; returns (parent beam of each new beam (k,), next tokens (k,))."""
        k, v = logp.shape
        logp = logp.astype(np.float32, copy=True)
        logp[self.finished] = -np.inf
        logp[self.finished, self.pad] = 0.0
        live = ~self.finished & (self.scores > -np.inf)
        need = np.where(live, self.tracker.needed(self.states, self.met), 0)
        self._no_early_end(logp, need)
        cand = self.scores[:, None] + logp  # (k, V)
        parent, word = self._candidates(cand, need)
        progress, states, met = self._progress(parent, word)
        room = max(self.options.max_output_tokens - self.steps - 1 - int(self.eos_at_limit), 0)
        over = np.maximum(self.tracker.total - progress - room, 0)  # tokens of phrases that cannot fit
        over[self.finished[parent]] = 0
        fits = over == over.min()  # those whose phrases still fit (else those that place the most)
        parent, word, progress, states, met = (x[fits] for x in (parent, word, progress, states, met))
        pick, dealt = self._stripes(cand[parent, word], progress, k)
        parent, word = parent[pick], word[pick]
        self.scores = cand[parent, word]
        self.scores[dealt:] = -np.inf  # rows left without a candidate
        self.states, self.met = states[pick], met[pick]
        return self._extend(parent, word, attn)

    def _no_early_end(self, logp: np.ndarray, need: np.ndarray) -> None:
        """No eos for a row that has not met every phrase, in place (but at the last step, or where eos is
        the row's only choice)."""
        rows = np.flatnonzero(need)
        if self.steps >= self.options.max_output_tokens - 1 or not len(rows):
            return
        best = logp[rows].argmax(axis=1)
        other = (best != self.eos) & np.isfinite(logp[rows, best])  # the common case: a finite best token
        for i in np.flatnonzero(~other):  # else any finite token but eos
            other[i] = np.isfinite(np.delete(logp[rows[i]], self.eos)).any()
        logp[rows[other], self.eos] = -np.inf

    def _candidates(self, cand: np.ndarray, need: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parent, token) of every candidate of step 2, finite ones only, each once."""
        k, v = cand.shape
        flat = cand.reshape(-1)
        best = top(flat, k)
        rows = np.flatnonzero(need)
        extra_rows, extra_words = self.tracker.advancing(self.states[rows], self.met[rows])
        parent = np.concatenate([best // v, np.arange(k), rows[extra_rows]])
        word = np.concatenate([best % v, cand.argmax(axis=1), extra_words])
        code = np.sort(parent * v + word)
        code = code[np.isfinite(flat[code]) & np.append(True, code[1:] != code[:-1])]  # finite, each once
        return code // v, code % v

    def _progress(self, parent: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each candidate's bank, and the states and met flags its row would have (a finished row's kept)."""
        before, had = self.states[parent], self.met[parent]
        states, met = self.tracker.advance(before, had, word)
        finished = self.finished[parent]
        states[finished], met[finished] = before[finished], had[finished]
        return self.tracker.total - self.tracker.needed(states, met), states, met

    @staticmethod
    def _stripes(scores: np.ndarray, progress: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        """Indexes of the k candidates dealt out over the banks (step 3), best score first, and how many
        were dealt (fewer candidates than rows: the last one repeats over the rest)."""
        order = np.lexsort((-scores, progress))  # by bank, best first within each
        banks = progress[order]
        start = np.searchsorted(banks, banks, side="left")
        rank = np.arange(len(order)) - start  # rank within its bank
        rank[np.argmax(scores[order])] = -1  # the best candidate of all comes first
        dealt = order[np.lexsort((-banks, rank))][:k]
        chosen = dealt[np.argsort(-scores[dealt], kind="stable")]
        dealt_n = len(chosen)
        if dealt_n < k:
            chosen = np.concatenate([chosen, np.full(k - dealt_n, chosen[-1])])
        return chosen, dealt_n

    def results(self) -> list[RawHypothesis]:
        """The n best beams: those that met every phrase first, then by score; each names its unmet ones."""
        return self.ranked()[: self.options.n_best]

    def ranked(self) -> list[RawHypothesis]:
        """Every beam's hypothesis (a repeated one once), those that met every phrase first, then by score."""
        hyps = self._rows()
        hyps.sort(key=lambda h: (len(h.unmet), -h.score))
        return hyps

    def _rows(self) -> list[RawHypothesis]:
        """Each row's hypothesis with its unmet phrases (a repeated row once)."""
        hyps, seen = [], set()
        for j, h in zip(self._live_rows(), super()._rows(), strict=True):
            key = tuple(h.tokens)
            if key in seen:
                continue
            seen.add(key)
            h.unmet = self.tracker.unmet(self.met[j])
            if self.transformers_penalty:
                h.score = h.log_prob / float(self._penalty(int(self.lengths[j])))
            hyps.append(h)
        return hyps

    def _live_rows(self) -> list[int]:
        """The rows BeamSearch._rows reports, in its order."""
        return [j for j in range(len(self.scores)) if self.scores[j] != -np.inf]

