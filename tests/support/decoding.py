"""Reference decoding for the batching tests: each text decoded alone, and the PyTorch source batch."""

from __future__ import annotations

import torch

from model.data import pad
from service.domain.types import DecodeOptions, FinishedEvent
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
