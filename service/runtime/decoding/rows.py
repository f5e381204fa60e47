"""The host-side state of a decode batch's rows, indexed like its caches (service/runtime/decoding/batch.py):
which rows a request holds (the others are holes), each row's source length, next input token, greedy score
and token history (service/runtime/decoding/controls.py). Grown, restarted, freed and compacted together."""

from __future__ import annotations

import numpy as np

from service.runtime.decoding.controls import TokenHistory


class RowState:
    """Per row: held or a hole, source length, next decoder input, summed log-prob, token history."""

    def __init__(self, pad: int, max_len: int) -> None:
        self._pad, self._max_len = pad, max_len
        self.reset()

    def reset(self) -> None:
        """No rows."""
        self.live = np.zeros(0, bool)  # row held by an active request (else a hole)
        self.src = np.zeros(0, np.int64)  # source length of the row's request
        self.next = np.zeros(0, np.int64)  # the next decoder input
        self.score = np.zeros(0, np.float32)  # greedy rows: sum of the chosen tokens' log-probs
        self.history = TokenHistory(self._max_len)  # the decoder start and the tokens since

    def __len__(self) -> int:
        """Rows, holes included."""
        return len(self.live)

    def grow(self, k: int) -> None:
        """Append k holes."""
        self.history.grow(k)
        self.next = np.concatenate([self.next, np.full(k, self._pad, np.int64)])
        self.score = np.concatenate([self.score, np.zeros(k, np.float32)])
        self.live = np.concatenate([self.live, np.zeros(k, bool)])
        self.src = np.concatenate([self.src, np.zeros(k, np.int64)])

    def start(self, rows: np.ndarray, source_lengths: np.ndarray, decoder_start: int) -> None:
        """New requests' rows: held, their sources' lengths, the decoder start as input and history."""
        self.next[rows], self.score[rows] = decoder_start, 0.0
        self.live[rows], self.src[rows] = True, source_lengths
        self.history.start(rows, decoder_start)

    def free(self, rows: np.ndarray) -> None:
        """These rows become holes."""
        self.live[rows] = False
        self.next[rows] = self._pad

    def keep(self, keep: np.ndarray | slice) -> None:
        """Only these rows, renumbered (a prefix slice is a view; an index array gathers)."""
        self.history.keep(keep)
        self.next, self.score = self.next[keep], self.score[keep]
        self.live, self.src = self.live[keep], self.src[keep]


def inherit(rows: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows a request's next beams occupy, given each one's parent beam among `rows` (the physical rows
    of its current beams, in beam order): a parent's first child stays in its parent's row, so only the
    other children are copied, into the rows of beams left without a child. Returns (each next beam's row,
    rows copied into, rows copied from); the two are disjoint, so the copies may run in any order."""
    k = len(parent)
    if (parent == np.arange(k)).all():
        return rows, rows[:0], rows[:0]
    _, first = np.unique(parent, return_index=True)  # each parent's first child
    childless = np.ones(k, bool)
    childless[parent] = False
    younger = np.ones(k, bool)
    younger[first] = False
    new = rows[parent]
    new[younger] = rows[childless]
    return new, rows[childless], rows[parent[younger]]
