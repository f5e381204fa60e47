"""Each hypothesis's progress through its request's required phrases (service/domain/constraints.py), for
many rows at once.

Every form of every phrase is a small automaton (Knuth-Morris-Pratt over the form's tokens): a row's state in
a form is the length of the longest prefix of the form that its tokens end with, so a phrase is met the first
time one of its forms' states reaches the form's length, wherever its tokens started (overlaps and restarts
included). A met phrase stays met.

The automata are arrays: `table[form, state, column]` is the next state, where a token's column in a form is
`column[form, token's index among the phrases' tokens + 1]` (0 for a token outside the form, or outside
every phrase: back to state 0). A step of N rows is two gathers, whatever N.

`needed` is the fewest tokens that still place every unmet phrase when none overlaps another: each unmet
phrase's shortest form, less the progress of the one phrase whose form is furthest along (only one can be
continued by the next token). A hypothesis's progress (its bank, constrained_beam.py) is the set's
`min_tokens` less `needed`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.domain.constraints import ConstraintSet, Phrase


def automaton(form: Phrase) -> tuple[list[int], np.ndarray]:
    """A form's KMP automaton: its alphabet (distinct tokens, in order of appearance) and the next state
    (len + 1, 1 + alphabet) after each state and token column (column 0: a token outside the alphabet,
    back to state 0; column i + 1: the alphabet's i-th token)."""
    alphabet = list(dict.fromkeys(form))
    n = len(form)
    fail = [0] * (n + 1)  # longest proper border of form[:s]
    for s in range(2, n + 1):
        b = fail[s - 1]
        while b and form[b] != form[s - 1]:
            b = fail[b]
        fail[s] = b + 1 if form[b] == form[s - 1] else 0
    table = np.zeros((n + 1, len(alphabet) + 1), np.int64)
    for s in range(n + 1):
        for col, t in enumerate(alphabet, 1):
            if s < n and form[s] == t:
                table[s, col] = s + 1
            elif s:
                table[s, col] = table[fail[s], col]
    return alphabet, table


class Tracker:
    """The automata of one request's ConstraintSet as arrays, and the arithmetic of rows' progress; rows'
    state is (states (N, forms) int64, met (N, phrases) bool), held by the search."""

    def __init__(self, constraints: ConstraintSet) -> None:
        self.forms = [f for c in constraints.constraints for f in c.forms]
        self.owner = np.array([i for i, c in enumerate(constraints.constraints) for _ in c.forms], np.int64)
        self.lengths = np.array([len(f) for f in self.forms], np.int64)
        self.shortest = np.array([c.shortest for c in constraints.constraints], np.int64)
        self.total = int(self.shortest.sum())
        n_forms, n_phrases = len(self.forms), len(self.shortest)
        self.of_phrase = np.zeros((n_forms, n_phrases), np.int64)  # one-hot: the phrase of each form
        self.of_phrase[np.arange(n_forms), self.owner] = 1
        self.vocab = np.array(sorted({t for f in self.forms for t in f}), np.int64)  # tokens that can move
        machines = [automaton(f) for f in self.forms]
        longest, widest = int(self.lengths.max(initial=0)), max((len(a) for a, _ in machines), default=0)
        self.table = np.zeros((n_forms, longest + 1, widest + 1), np.int64)
        self.column = np.zeros((n_forms, len(self.vocab) + 1), np.int64)
        self.next_token = np.full((n_forms, longest + 1), -1, np.int64)  # form[state], -1 past its end
        for f, (form, (alphabet, table)) in enumerate(zip(self.forms, machines, strict=True)):
            self.table[f, : len(form) + 1, : len(alphabet) + 1] = table
            self.column[f, np.searchsorted(self.vocab, alphabet) + 1] = np.arange(1, len(alphabet) + 1)
            self.next_token[f, : len(form)] = form
        self.first = self.next_token[:, 0]

    def start(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The states and met flags of `rows` rows that generated nothing."""
        return np.zeros((rows, len(self.forms)), np.int64), np.zeros((rows, len(self.shortest)), bool)

    def advance(self, states: np.ndarray, met: np.ndarray, tokens: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Rows' states (N, forms) and met flags (N, phrases) after each row's token (N,)."""
        at = np.minimum(np.searchsorted(self.vocab, tokens), len(self.vocab) - 1)  # phrases are non-empty
        known = self.vocab[at] == tokens
        columns = self.column[:, np.where(known, at + 1, 0)].T  # (N, forms)
        new = self.table[np.arange(len(self.forms)), states, columns]
        done = (new == self.lengths).astype(np.int64)
        return new, met | (done @ self.of_phrase > 0)

    def walk(self, tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One row's state (1, forms), (1, phrases) after a whole sequence of tokens."""
        states, met = self.start(1)
        for t in tokens:
            states, met = self.advance(states, met, np.array([t], np.int64))
        return states, met

    def needed(self, states: np.ndarray, met: np.ndarray) -> np.ndarray:
        """Each row's fewest tokens (N,) that still place every unmet phrase (module doc)."""
        open_ = ~met[:, self.owner]
        credit = self.shortest[self.owner] - (self.lengths - states)  # tokens of the shortest form saved
        best = np.where(open_, credit, 0).max(axis=1, initial=0)
        return (self.shortest * ~met).sum(axis=1) - best

    def advancing(self, states: np.ndarray, met: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, token) pairs of the tokens that continue an unmet phrase's form from each row's state (its
        next token, or its first), duplicates included."""
        open_ = ~met[:, self.owner]
        following = self.next_token[np.arange(len(self.forms)), states]
        rows, forms = np.nonzero(open_)
        tokens = np.concatenate([following[rows, forms], self.first[forms]])
        rows = np.concatenate([rows, rows])
        keep = tokens >= 0
        return rows[keep], tokens[keep]

    def unmet(self, met: np.ndarray) -> tuple[int, ...]:
        """The indexes of the phrases not met by one row's flags (phrases,)."""
        return tuple(np.flatnonzero(~met).tolist())
