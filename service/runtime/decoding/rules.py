"""The rules a bundle's `generation` object states for each decoder step's log-probs
(interface/generation.py), applied to every row of the batch before any search sees them.

In transformers' order (generation/utils.py `_get_logits_processor`: NoBadWordsLogitsProcessor,
ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor, SuppressTokensLogitsProcessor,
LogitNormalization last), on the log-probs as its beam search processes them (after log-softmax):

1. suppressed ids get -inf (never chosen; the other log-probs are left as they are);
2. a newcomer's forced first token (its target language): -inf everywhere but 0 at the token;
3. rows whose next token is the last their request's max_output_tokens allows get eos that way;
4. renormalize: every row is log-softmaxed again (a forced row stays 0 / -inf).

Greedy search takes the argmax of the result (transformers' greedy applies the same processors to
raw logits: the same argmax) and sums the processed log-prob of each chosen token, so a forced
token adds 0. Everything happens in place on the step's log-probs, which belong to this step only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interface.generation import GenerationSpec


def force_token(logp: np.ndarray, rows: np.ndarray, token: int) -> None:
    """Make `token` the only choice of these rows, in place, as transformers' ForcedBOSTokenLogitsProcessor
    does: -inf everywhere but 0 at the token, so that it adds 0 to a hypothesis's log-prob."""
    logp[rows] = -np.inf
    logp[rows, token] = 0.0


def renormalize(logp: np.ndarray) -> None:
    """Log-softmax every row again, in place (float32, as LogitNormalization in PyTorch)."""
    top = logp.max(axis=-1, keepdims=True)
    with np.errstate(under="ignore"):
        total = np.exp(logp - top).sum(axis=-1, keepdims=True, dtype=np.float32)
    logp -= top
    logp -= np.log(total)


@dataclass(frozen=True)
class StepRules:
    """A bundle's per-step rules: suppressed ids, eos forced at the length limit, renormalization."""

    suppress: tuple[int, ...] = ()
    eos_at_limit: bool = False
    renormalize: bool = False
    begin_suppress: tuple[int, ...] = ()  # never the first token after the forced ones (controls.py)

    @classmethod
    def of(cls, spec: GenerationSpec) -> StepRules:
        """The rules a bundle's generation object states (none for format 1)."""
        return cls(tuple(spec.suppress_ids), spec.forced_eos_at_limit, spec.renormalize,
                   tuple(spec.begin_suppress_ids))

    @property
    def every_step(self) -> bool:
        """Whether the rules change the log-probs of every step (not only forced rows)."""
        return bool(self.suppress) or self.renormalize

    def apply(self, logp: np.ndarray, eos: int, forced: Sequence[tuple[np.ndarray, int]] = (),
              at_limit: Sequence[np.ndarray] = ()) -> None:
        """The rules on logp (rows, V) in place: `forced` (rows, token) of newcomers' first tokens,
        `at_limit` the rows whose next token is their last (eos when eos_at_limit)."""
        if self.suppress:
            logp[:, list(self.suppress)] = -np.inf
        for rows, token in forced:
            force_token(logp, rows, token)
        if self.eos_at_limit:
            for rows in at_limit:
                force_token(logp, rows, eos)
        if self.renormalize:
            renormalize(logp)
