"""The requests of a decode batch as a step sees them: each one's rows, options and search state
(`ActiveRequest`), and the active requests grouped by what a step does with them (`StepGroups`).

Rows, options and searches are defined in service/runtime/decoding/batch.py, search.py and controls.py; this
module only holds them together. A greedy request (one row, argmax or sampling) is advanced with the others in
one vectorised pick; a beam request, or one asking for alternatives, by its own search, which picks each of
its rows' parent and token; a request with required phrases may then give back rows (plain_first.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.domain.types import Request, ResolvedOptions
from service.runtime.decoding.controls import RowGroup
from service.runtime.decoding.plain_first import PlainFirstSearch
from service.runtime.decoding.search import AlternativesSearch, BeamSearch, GreedySearch


@dataclass(eq=False)
class ActiveRequest:
    """A request in the batch: its rows, options and search state."""

    request: Request
    options: ResolvedOptions
    # (options.rows,) row indices in the search's row order (a beam step permutes them: rows.py inherit); k
    # fewer once a half of a PlainFirstSearch ended
    rows: np.ndarray
    search: GreedySearch | BeamSearch | AlternativesSearch | PlainFirstSearch  # spec.py's choice
    stream: Callable[[int], str] | None  # the tokenizer's detokenizer of a streaming request
    rng: np.random.Generator | None = None  # a sampling request's own generator (sampling.py)

    @property
    def greedy(self) -> bool:
        """One row, advanced by the batch's vectorised argmax (or a draw)."""
        return isinstance(self.search, GreedySearch)


@dataclass(frozen=True)
class StepGroups:
    """Active requests by what a step does with them (the batch keeps it until requests or rows change)."""

    greedy: list[ActiveRequest]  # one row, argmax or sampling
    greedy_rows: np.ndarray | slice  # their rows (a slice of all when they are rows 0..n-1 in order)
    beams: list[ActiveRequest]  # beam search or alternatives: their search picks each row's parent and token
    controlled: RowGroup | None  # the rows whose options process the log-probs (controls.py)
    forcing: list[tuple[np.ndarray, ResolvedOptions]]  # requests with forced tokens or begin-suppressed ids
    sampling: list[int]  # indices into greedy of sampling requests
    halves: list[ActiveRequest]  # of beams, those with required phrases: their searches release rows
    # whether a step keeps the rows' token histories: some request reads its own (a controlled or forcing
    # one; the others' rows are never read, and a newcomer's history starts when it joins)
    history: bool = False

    @classmethod
    def of(cls, active: Sequence[ActiveRequest], n_rows: int, begin_suppress: bool) -> StepGroups:
        """The groups of these requests in a batch of n_rows rows (holes included); with begin_suppress every
        request is watched for its first free position."""
        greedy = [a for a in active if a.greedy]
        rows: np.ndarray | slice = np.array([a.rows[0] for a in greedy], np.int64)
        if len(rows) == n_rows and (rows == np.arange(len(rows))).all():
            rows = slice(None)
        controlled = RowGroup.of([(a.rows, a.options, a.greedy) for a in active if a.options.controlled])
        forcing = [(a.rows, a.options) for a in active if a.options.forced or begin_suppress]
        sampling = [i for i, a in enumerate(greedy) if a.rng is not None]
        halves = [a for a in active if isinstance(a.search, PlainFirstSearch)]
        return cls(greedy, rows, [a for a in active if not a.greedy], controlled, forcing, sampling, halves,
                   controlled is not None or bool(forcing))
