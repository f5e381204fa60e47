"""Helpers shared by the scheduler tests: a bounded event loop, a blocking fault hook, metric deltas."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from prometheus_client import REGISTRY

from service.domain.types import Result
from tests.support.corpus import tiny_pairs

MAX_NEW = 30
LIMIT_S = 60.0  # every test's event loop is bounded by this


def sample_texts() -> list[str]:
    """Sources of clearly different lengths; the first is long (many output tokens)."""
    pairs = tiny_pairs(16, 7)
    return [f"{pairs[1][0]} {pairs[2][0]} {pairs[3][0]}", "we 5", *(p[0] for p in pairs[4:14])]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a test coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, LIMIT_S))


def toks(result: Result) -> list[list[int]]:
    """Tokens of a result's hypotheses."""
    return [h.tokens for h in result.hypotheses]


class Gate:
    """Fault hook that blocks the worker before the n-th run of `stage` (n in `at`) until released."""

    def __init__(self, stage: str | None = "decoder", at: tuple[int, ...] = (1,),
                 fail: Callable[[str, int], bool] | None = None):
        self.stage, self.fail = stage, fail
        self.counts: dict[str, int] = {"encoder": 0, "decoder": 0}
        self.stages: list[str] = []
        self.reached = {n: threading.Event() for n in at}
        self.released = {n: threading.Event() for n in at}

    def __call__(self, stage: str) -> None:
        """Called by the runner in the worker thread before each ORT run."""
        self.counts[stage] += 1
        self.stages.append(stage)
        n = self.counts[stage]
        if stage == self.stage and n in self.reached:
            self.reached[n].set()
            self.released[n].wait(LIMIT_S)
        if self.fail is not None and self.fail(stage, n):
            raise RuntimeError(f"injected {stage} failure")

    async def wait(self, n: int | None = None) -> None:
        """Until the worker is blocked at the gate of run n (the first one by default)."""
        event = self.reached[min(self.reached) if n is None else n]
        assert await asyncio.to_thread(event.wait, LIMIT_S), "the worker never reached the gate"

    def release(self, n: int | None = None) -> None:
        """Let the worker go on from the gate of run n (the first one by default)."""
        self.released[min(self.released) if n is None else n].set()


def sample(name: str, **labels: str) -> float:
    """Current value of a sample of the default registry (0 if absent)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def counts() -> dict[str, float]:
    """Counts and sums of the scheduler's metrics, to compare before/after."""
    out = {}
    for h in ("queue_time_seconds", "time_to_first_token_seconds", "time_per_output_token_seconds",
              "encoder_compute_seconds", "decoder_step_seconds", "batch_size", "input_tokens",
              "output_tokens"):
        out[h] = sample(f"translator_{h}_count")
        out[h + ":sum"] = sample(f"translator_{h}_sum")
    for le in ("1.0", "2.0", "4.0"):
        out[f"rows<={le}"] = sample("translator_batch_size_bucket", le=le)
    return out


def delta(before: dict[str, float]) -> dict[str, float]:
    """Change of every metric of counts() since `before`."""
    after = counts()
    return {k: after[k] - before[k] for k in after}
