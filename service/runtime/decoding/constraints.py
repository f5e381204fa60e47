"""Each hypothesis's progress through its request's required phrases (service/domain/constraints.py).

Every form of every phrase is a small automaton (Knuth-Morris-Pratt over the form's tokens): a row's state in
a form is the length of the longest prefix of the form that its tokens end with, so a phrase is met the first
time one of its forms' states reaches the form's length, wherever its tokens started (overlaps and restarts
included). A met phrase stays met.

`needed` is the fewest tokens that still place every unmet phrase when none overlaps another: each unmet
phrase's shortest form, less the progress of the one phrase whose form is furthest along (only one can be
continued by the next token). A hypothesis's progress (its bank, constrained_beam.py) is the set's
`min_tokens` less `needed`.
"""

from __future__ import annotations

import numpy as np

from service.domain.constraints import ConstraintSet, Phrase


def automaton(form: Phrase) -> tuple[dict[int, int], np.ndarray]:
    """A form's KMP automaton: its alphabet (token -> column) and next state (len + 1, alphabet) after
    each state and token (a token outside the alphabet goes back to state 0)."""
    alphabet = {t: i for i, t in enumerate(dict.fromkeys(form))}
    n = len(form)
    fail = [0] * (n + 1)  # longest proper border of form[:s]
    for s in range(2, n + 1):
        b = fail[s - 1]
        while b and form[b] != form[s - 1]:
            b = fail[b]
        fail[s] = b + 1 if form[b] == form[s - 1] else 0
    table = np.zeros((n + 1, len(alphabet)), np.int64)
    for s in range(n + 1):
        for t, col in alphabet.items():
            if s < n and form[s] == t:
                table[s, col] = s + 1
            elif s:
                table[s, col] = table[fail[s], col]
    return alphabet, table


class Tracker:
    """The automata of one request's ConstraintSet, and the arithmetic of a row's progress; a row's state
    is (states (forms,) int64, met (phrases,) bool), held by the search."""

    def __init__(self, constraints: ConstraintSet) -> None:
        self.forms = [f for c in constraints.constraints for f in c.forms]
        self.owner = np.array([i for i, c in enumerate(constraints.constraints) for _ in c.forms], np.int64)
        self.lengths = np.array([len(f) for f in self.forms], np.int64)
        self.shortest = np.array([c.shortest for c in constraints.constraints], np.int64)
        self.total = int(self.shortest.sum())
        self.machines = [automaton(f) for f in self.forms]
        self.tokens = frozenset(t for f in self.forms for t in f)  # tokens that can move a state

    def start(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The states and met flags of `rows` rows that generated nothing."""
        return np.zeros((rows, len(self.forms)), np.int64), np.zeros((rows, len(self.shortest)), bool)

    def step(self, states: np.ndarray, met: np.ndarray, token: int) -> tuple[np.ndarray, np.ndarray]:
        """One row's state after `token`."""
        if token not in self.tokens:
            return np.zeros_like(states), met
        pairs = zip(states.tolist(), self.machines, strict=True)
        new = np.array([table[s, col[token]] if token in col else 0 for s, (col, table) in pairs], np.int64)
        done = new == self.lengths
        if done.any():
            met = met.copy()
            met[self.owner[done]] = True
        return new, met

    def needed(self, states: np.ndarray, met: np.ndarray) -> int:
        """Fewest tokens that still place every unmet phrase (module doc)."""
        if met.all():
            return 0
        open_ = ~met[self.owner]
        credit = self.shortest[self.owner] - (self.lengths - states)  # tokens of the shortest form saved
        best = int(credit[open_].max(initial=0))
        return int(self.shortest[~met].sum()) - max(best, 0)

    def advancing(self, states: np.ndarray, met: np.ndarray) -> list[int]:
        """The tokens that continue an unmet phrase's form from this state (its next token, or its first)."""
        open_ = ~met[self.owner]
        out = {f[s] for f, s, o in zip(self.forms, states.tolist(), open_.tolist(), strict=True) if o}
        out |= {f[0] for f, o in zip(self.forms, open_.tolist(), strict=True) if o}
        return sorted(out)

    def unmet(self, met: np.ndarray) -> tuple[int, ...]:
        """The indexes of the phrases not met."""
        return tuple(np.flatnonzero(~met).tolist())
