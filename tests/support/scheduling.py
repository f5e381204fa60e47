"""Helpers of the tests that drive a scheduler or a server's worker: a bounded event loop, and the
one fault hook of the tests (`Gate`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from service.runtime.runner import Runner

LIMIT_S = 60.0  # every test's event loop, and every hold of a Gate, is bounded by this


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a test coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, LIMIT_S))


def injected(stage: str) -> BaseException:
    """The error a Gate raises for a failing run by default."""
    return RuntimeError(f"injected {stage} failure")


class Gate:
    """The runner fault hook of the tests (`runner.fault_hook = gate`), called by the worker before each
    ONNX Runtime run: it counts the encoder and decoder runs, holds the worker before the n-th run of
    `stage` (n in `at`) until that gate is released, and then raises `error(stage)` for the runs that
    `fail(stage, n)` picks. Every hold is bounded (LIMIT_S)."""

    def __init__(self, stage: str | None = "decoder", at: tuple[int, ...] = (1,),
                 fail: Callable[[str, int], bool] | None = None,
                 error: Callable[[str], BaseException] = injected):
        self.stage, self.fail, self.error = stage, fail, error
        self.counts: dict[str, int] = {"encoder": 0, "decoder": 0}
        self.stages: list[str] = []
        self.reached = {n: threading.Event() for n in at}
        self.released = {n: threading.Event() for n in at}

    def __call__(self, stage: str) -> None:
        """Called by the runner in the worker thread before each run."""
        self.counts[stage] += 1
        self.stages.append(stage)
        n = self.counts[stage]
        if stage == self.stage and n in self.reached:
            self.reached[n].set()
            self.released[n].wait(LIMIT_S)
        if self.fail is not None and self.fail(stage, n):
            raise self.error(stage)

    def _at(self, n: int | None) -> int:
        return min(self.reached) if n is None else n

    def wait_held(self, n: int | None = None) -> None:
        """Block this thread until the worker is held at the gate of run n (the first by default)."""
        assert self.reached[self._at(n)].wait(LIMIT_S), "the worker never reached the gate"

    async def wait(self, n: int | None = None) -> None:
        """From a coroutine: until the worker is held at the gate of run n (the first by default)."""
        await asyncio.to_thread(self.wait_held, n)

    def release(self, n: int | None = None) -> None:
        """Let the worker go on from the gate of run n (the first one by default)."""
        self.released[self._at(n)].set()

    def open(self) -> None:
        """Release every gate, for good."""
        for event in self.released.values():
            event.set()


@contextmanager
def gate_on(runner: Runner, gate: Gate) -> Iterator[Gate]:
    """Install `gate` as the runner's fault hook; on exit open it and remove it, whatever happened."""
    runner.fault_hook = gate
    try:
        yield gate
    finally:
        gate.open()
        runner.fault_hook = None
