"""Drawing a sampling row's next token: transformers' warpers (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, in that order) on the row's processed log-probs, then one draw from the softmax of what they
keep.

Every request has its own generator (numpy's PCG64, seeded by the request's seed, else from the operating
system's entropy), drawn from once per step: a seeded request samples the same tokens whatever else shares its
batch. The warpers are shift-invariant, so log-probs give what logits give. The token's reported log-prob is
its processed log-prob before the warpers: the model's, as Score would give it.

Top-k and top-p look first among the tokens within a factor FLOOR of the most likely one (a few, out of a
vocabulary of tens of thousands), and further only when those hold fewer than k tokens or less than top_p of
the mass: the kept set is the same, found without sorting the vocabulary.
"""

from __future__ import annotations

import math

import numpy as np

from service.domain.types import ResolvedOptions

FLOOR = 1e-4  # first look among tokens at least this likely relative to the best (then 1e-4 times that)


def generator(options: ResolvedOptions) -> np.random.Generator:
    """The request's generator: its seed's, or a fresh one."""
    return np.random.default_rng(options.seed)


def candidates(logp: np.ndarray, options: ResolvedOptions) -> tuple[np.ndarray | None, np.ndarray]:
    """The tokens a draw may pick after temperature, top-k and top-p (None: every token) and their
    float64 weights (probabilities up to a common factor)."""
    scores = np.divide(logp, np.float32(options.temperature or 1.0), dtype=np.float32)
    scores -= scores.max()
    ids = None
    if 0 < options.top_k < len(scores):  # TopKLogitsWarper: below the k-th best goes (ties kept)
        ids = _top_k(scores, options.top_k)
    if options.top_p < 1.0:  # TopPLogitsWarper: the least likely tokens holding <= 1 - top_p go
        ids = _nucleus(scores, ids, options.top_p)
    with np.errstate(under="ignore"):
        weights = np.exp(scores if ids is None else scores[ids], dtype=np.float64)
    return ids, weights


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Ids of the tokens scoring at least the k-th best score (scores' maximum is 0)."""
    floor = math.log(FLOOR)
    while True:
        near = np.flatnonzero(scores >= floor) if floor > -1e4 else np.arange(len(scores))
        if len(near) >= k:
            kth = np.partition(scores[near], len(near) - k)[len(near) - k]
            return near[scores[near] >= kth]
        floor *= 2 if floor > -1e4 else 1


def _nucleus(scores: np.ndarray, ids: np.ndarray | None, top_p: float) -> np.ndarray:
    """Ids (among `ids`, None: all) of the most likely tokens whose mass before each is < top_p of the
    whole (what TopPLogitsWarper keeps; at least the best)."""
    pool = np.arange(len(scores)) if ids is None else ids
    with np.errstate(under="ignore"):
        weights = np.exp(scores[pool], dtype=np.float64)
    need = top_p * weights.sum()
    floor = math.log(FLOOR)
    while True:
        near = np.flatnonzero(scores[pool] >= floor) if floor > -1e4 else np.arange(len(pool))
        if weights[near].sum() >= need or len(near) == len(pool):
            ranked = np.sort(weights[near])[::-1]  # values only: a SIMD sort, far cheaper than an argsort
            before = np.concatenate([[0.0], np.cumsum(ranked)[:-1]])
            cut = ranked[int(np.count_nonzero(before < need)) - 1]  # the least likely token kept
            return pool[near[weights[near] >= cut]]  # (a tie at the cut keeps every token of that weight)
        floor *= 2 if floor > -1e4 else 1


def draw(ids: np.ndarray | None, weights: np.ndarray, rng: np.random.Generator) -> int:
    """One token of `ids` (None: the vocabulary) with probability proportional to its weight, by inverting
    the cumulative distribution at one uniform draw."""
    cumulative = np.cumsum(weights)
    at = min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")), len(weights) - 1)
    return at if ids is None else int(ids[at])
