"""Drawing a sampling row's next token: transformers' warpers (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, in that order) on the row's processed log-probs, then one draw from the softmax.

Every request has its own generator (numpy's PCG64, seeded by the request's seed, else from the operating
system's entropy), drawn from once per step: a seeded request samples the same tokens whatever else
shares its batch. The warpers are shift-invariant, so log-probs give what logits give. The token's
reported log-prob is its processed log-prob before the warpers: the model's, as Score would give it.
"""

from __future__ import annotations

import numpy as np

from service.domain.types import ResolvedOptions


def generator(options: ResolvedOptions) -> np.random.Generator:
    """The request's generator: its seed's, or a fresh one."""
    return np.random.default_rng(options.seed)


def warp(logp: np.ndarray, options: ResolvedOptions) -> np.ndarray:
    """A row's (V,) log-probs after temperature, top-k and top-p, as float64 scores (-inf: removed)."""
    scores = logp.astype(np.float64) / float(options.temperature or 1.0)
    k = options.top_k
    if 0 < k < len(scores):  # TopKLogitsWarper: below the k-th best is removed (ties kept)
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        scores[scores < kth] = -np.inf
    if options.top_p < 1.0:  # TopPLogitsWarper: the least likely tokens whose mass is <= 1 - top_p go
        order = np.argsort(scores, kind="stable")  # ascending
        ranked = scores[order]
        with np.errstate(under="ignore", invalid="ignore"):
            probs = np.exp(ranked - ranked[-1])
        cumulative = np.cumsum(probs / probs.sum())
        removed = cumulative <= 1.0 - options.top_p
        removed[-1] = False  # min_tokens_to_keep = 1
        scores[order[removed]] = -np.inf
    return scores


def draw(scores: np.ndarray, rng: np.random.Generator) -> int:
    """One token from softmax(scores), by inverting the cumulative distribution at one uniform draw."""
    top = scores.max()
    with np.errstate(under="ignore"):
        probs = np.exp(scores - top)
    cumulative = np.cumsum(probs)
    token = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(token, len(scores) - 1)
