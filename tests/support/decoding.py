"""Reference decoding for the batching tests: each text decoded alone, and the PyTorch source batch."""

from __future__ import annotations

import numpy as np
import torch

from model.data import pad
from service.domain.types import DecodeOptions, FinishedEvent, Hypothesis
from service.runtime.runner import Runner
from tests.support.corpus import tiny_pairs

MAX_NEW = 30


def varied_texts() -> list[str]:
    """Sources of clearly different lengths."""
    pairs = tiny_pairs(12, 7)
    long = f"{pairs[1][0]} {pairs[2][0]} {pairs[3][0]}"
    return [pairs[0][0], long, "we 5", pairs[4][0], f"{pairs[5][0]} 90"]


def reference_src(ids: list[list[int]]) -> torch.Tensor:
    """Right-padded source batch for the PyTorch decoders."""
    return pad(ids, 0)


def tokens(results) -> list[list[list[int]]]:
    """Tokens of every hypothesis of every input."""
    return [[h.tokens for h in hyps] for hyps in results]


def alone(runner: Runner, ids: list[list[int]], opts: list[DecodeOptions]) -> list[list[list[int]]]:
    """Tokens when each request is decoded by itself."""
    return [tokens(runner.translate([x], o))[0] for x, o in zip(ids, opts, strict=True)]


def drain(batch, limit: int = 500) -> dict[int, list]:
    """Step a batch until it is empty; hypotheses by request id."""
    out = {}
    for _ in range(limit):
        if not len(batch):
            return out
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    raise AssertionError("batch did not drain")


def reference(runner: Runner, text: str, options: DecodeOptions) -> list[list[int]]:
    """Tokens of the n-best hypotheses when the text is decoded alone (the fault hook not called)."""
    hook, runner.fault_hook = runner.fault_hook, None
    try:
        return [h.tokens for h in runner.translate([text], options)[0]]
    finally:
        runner.fault_hook = hook


def reference_hypotheses(runner: Runner, text: str | list[int], options: DecodeOptions) -> list[Hypothesis]:
    """The n-best hypotheses of a text (or source ids) decoded alone (the fault hook not called)."""
    hook, runner.fault_hook = runner.fault_hook, None
    try:
        return runner.translate([text], options)[0]
    finally:
        runner.fault_hook = hook


def assert_same_hypotheses(got: list[Hypothesis], want: list[Hypothesis], atol: float = 1e-4) -> None:
    """Same tokens, and log-probs and scores equal within float32 noise (another batch shape may sum
    in another order)."""
    assert [h.tokens for h in got] == [h.tokens for h in want]
    np.testing.assert_allclose([h.log_prob for h in got], [h.log_prob for h in want], rtol=1e-5, atol=atol)
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-5, atol=atol)


def assert_distinct(outputs: list) -> None:
    """The reference outputs differ across inputs: a test comparing with them cannot pass by
    returning one output for everything."""
    assert len({repr(o) for o in outputs}) > 1, "every reference output is the same"
