"""The purpose-made model of the constrained search's tests: a tiny vocabulary (pad, eos, four words) whose
log-probs are a fixed random function of the tokens so far, and whether tokens hold a phrase."""

from __future__ import annotations

import numpy as np

PAD, EOS = 0, 1
WORDS = (2, 3, 4, 5)  # the model's other tokens
V = 6


def model_logp(seed: int, history: tuple[int, ...]) -> np.ndarray:
    """The purpose-made model: log-probs (V,) of the next token after `history`, a fixed function of both
    (pad never)."""
    logits = np.random.default_rng([seed, len(history), *history]).normal(0.0, 1.5, V)
    logits[PAD] = -np.inf
    return (logits - np.logaddexp.reduce(logits[1:])).astype(np.float32)


def holds(tokens: tuple[int, ...], forms: list[tuple[int, ...]]) -> bool:
    """Whether any form appears in tokens as a contiguous run."""
    return any(tokens[i : i + len(f)] == f for f in forms for i in range(len(tokens) - len(f) + 1))
