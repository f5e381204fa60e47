"""The n largest of a search step's candidate scores, best first, equal values by index: the one selection
every beam search makes over its (rows x vocabulary) candidates (search.py, pooled_beam.py,
constrained_beam.py).

A partition of all K*V scores reads them several times. Over many scores, a lower bound on the n-th largest
comes first from a strided sample (the n-th largest of any subset is no larger than the whole's); one
comparison keeps the few scores at or above it, and only those are partitioned. Every value tied with the
n-th largest passes the bound, so the result, ties included, is the one the full partition gives; when the
bound keeps too many (a flat or mostly -inf row), the full partition runs.
"""

from __future__ import annotations

import numpy as np

STRIDE = 64  # one score in STRIDE is sampled for the bound
SAMPLED_FROM = 16 * STRIDE  # fewer scores per wanted one than this: partition them all


def top(values: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest of the 1-D `values`, best first, equal values by index (no NaN)."""
    if n >= len(values):
        return np.argsort(-values, kind="stable")
    if len(values) >= SAMPLED_FROM * n:
        sample = values[::STRIDE]
        at = len(sample) - n
        bound = np.partition(sample, at)[at]  # the sample's n-th largest: <= the whole's
        near = np.flatnonzero(values >= bound)
        if 4 * len(near) <= len(values):
            return near[_ranked(values[near], n)]
    return _ranked(values, n)


def _ranked(values: np.ndarray, n: int) -> np.ndarray:
    """top() by a partition of all the values (n < len(values))."""
    part = np.argpartition(-values, n - 1)[:n]
    bound = values[part].min()
    above = np.flatnonzero(values > bound)
    idx = np.concatenate([above, np.flatnonzero(values == bound)[: n - len(above)]])
    return idx[np.lexsort((idx, -values[idx]))]
