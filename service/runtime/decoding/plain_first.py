"""Required phrases beside the plain search: a request's output is its output without the phrases whenever
that output already holds every phrase, at any beam size.

With beam_size k the request holds 2k rows (ResolvedOptions.rows): rows 0..k-1 run the plain search exactly
as the request without phrases would (the bundle's beam search: search.py, or pooled_beam.py for a
"transformers" bundle; for k = 1 greedy decoding, as a beam search of one row), rows k..2k-1 the constrained
beam search (constrained_beam.py), both on the same processed log-probs. When the plain search ends, its
best hypothesis is walked through the phrases' automata (constraints.py); if it holds every phrase it is
the answer, else the constrained search's hypotheses are:

- plain best holds every phrase, n_best 1: the request ends at once (the constrained rows are dropped);
- plain best holds every phrase, n_best > 1: after the constrained search ends, the plain best first, then
  the constrained hypotheses that differ from it;
- otherwise: the constrained search's hypotheses, when it ends.

A half that has ended gives back its rows (`released`): its hypotheses live in its search object, not in the
rows, so the request goes on in the other half's k rows alone, and the batch frees the k it no longer needs
(a hole that another request may take, or that compaction drops) instead of computing them. Beam size 1
needs the plain row too: the constrained search counts the tokens its phrases still need as if none
overlapped (constrained_beam.py), so it may place overlapping phrases before greedy decoding would have.
Cost: the decoder runs 2k rows instead of k only while both halves run; once one ends, k
(bench/engines/constraints.py measures it).
"""

from __future__ import annotations

import numpy as np

from service.runtime.decoding.constrained_beam import ConstrainedBeamSearch
from service.runtime.decoding.search import BeamSearch, RawHypothesis


class PlainFirstSearch:
    """A plain beam search and a constrained one over one request's rows, k per running half (module doc); a
    search to the batch: `advance`, `released`, `done`, `at_limit`, `results`."""

    def __init__(self, plain: BeamSearch, constrained: ConstrainedBeamSearch) -> None:
        self.plain, self.constrained = plain, constrained
        self.options, self.k = constrained.options, len(constrained.scores)
        self.steps = 0
        self.plain_holds: bool | None = None  # whether the plain best holds every phrase (None: not ended)
        self.running: list[BeamSearch] = [plain, constrained]  # the halves that hold rows, in row order
        # positions, among the rows the last `advance` took, of the halves that ended there (their
        # hypotheses stay in their searches): the batch frees those rows; empty while both halves run
        self.released = np.zeros(0, np.int64)

    @property
    def done(self) -> bool:
        """The plain search ended and its best is the answer (n_best 1), or both searches ended."""
        if self.plain_holds is None:
            return False
        return (self.plain_holds and self.options.n_best == 1) or self.constrained.done

    @property
    def at_limit(self) -> bool:
        """The next token is the last one max_output_tokens allows."""
        return self.steps == self.options.max_output_tokens - 1

    def advance(self, logp: np.ndarray, attn: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Consume logp (k per running half, V) of this step (the plain rows first while the plain search
        runs); returns (parent row of each row, next tokens), over the same rows; `released` then names
        those of them the search will not take again."""
        if len(logp) != self.k * len(self.running):
            raise ValueError(f"{len(logp)} rows of log-probs for {len(self.running)} running halves of "
                             f"{self.k} rows")
        parents, words = [], []
        for i, half in enumerate(self.running):
            rows = slice(i * self.k, (i + 1) * self.k)
            parent, word = half.advance(logp[rows], None if attn is None else attn[rows])
            parents.append(parent + i * self.k)
            words.append(word)
        self.steps += 1
        if self.plain_holds is None and self.plain.done:
            best = self.plain.results()[:1]
            self.plain_holds = bool(best) and self._holds(best[0])
        ended = [i for i, half in enumerate(self.running) if half.done]
        self.released = np.array([j for i in ended for j in range(i * self.k, (i + 1) * self.k)], np.int64)
        self.running = [half for half in self.running if not half.done]
        return np.concatenate(parents), np.concatenate(words)

    def _holds(self, h: RawHypothesis) -> bool:
        """Whether a hypothesis holds every required phrase."""
        _, met = self.constrained.tracker.walk(h.tokens)
        return bool(met.all())

    def results(self) -> list[RawHypothesis]:
        """The plain best when it holds every phrase (then the constrained ones that differ from it), else
        the constrained search's hypotheses."""
        if not self.plain_holds:
            return self.constrained.results()
        best = self.plain.results()[0]
        if self.options.n_best == 1:
            return [best]
        others = [h for h in self.constrained.ranked() if h.tokens != best.tokens]
        return [best, *others][: self.options.n_best]
