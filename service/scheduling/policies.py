"""How the scheduler behaves: its settings, and the admission policy of each batching mode.

The worker (service/scheduling/worker.py) asks its policy, once per round, how many queued texts may join the
decode batch now; the policy sees only a `QueueView` and answers an `Admission`. Who exactly joins is the
JobQueue's FIFO rule (rows, token budget). Policies are plain objects passed down to the worker: nothing calls
back up to the scheduler.

- `NoBatching` (none): one text at a time, decoded to completion.
- `DynamicBatching` (dynamic, Triton-style): when the batch is empty, wait until max_batch_size
  rows are queued or the oldest text waited max_queue_delay_ms, then decode that batch to the end.
- `ContinuousBatching` (continuous, Orca / vLLM-style): before every decoder step, queued texts
  join while rows are free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from service.domain.types import BatchingMode


@dataclass(frozen=True)
class SchedulerSettings:
    """Sizes and limits of a scheduler; ValueError for a value out of range."""

    max_batch_size: int = 32  # rows of the decode batch (a beam-k text takes k)
    max_batch_tokens: int = 0  # token budget of the batch's rows (source + decoded); 0 = none
    max_queue_delay_ms: float = 5.0  # dynamic mode: longest wait for a batch to fill
    queue_size: int = 256  # most texts waiting
    watchdog_s: float = 30.0  # a model run longer than this makes the scheduler unhealthy

    def __post_init__(self) -> None:
        """Reject values out of range, naming them."""
        if self.max_batch_size < 1 or self.queue_size < 1:
            raise ValueError(f"max_batch_size and queue_size must be >= 1: {self.max_batch_size}, "
                             f"{self.queue_size}")
        if self.max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0 (0 = no limit), got {self.max_batch_tokens}")
        if self.max_queue_delay_ms < 0 or self.watchdog_s <= 0:
            raise ValueError(f"bad max_queue_delay_ms {self.max_queue_delay_ms} or watchdog_s "
                             f"{self.watchdog_s}")

    @property
    def token_budget(self) -> float:
        """max_batch_tokens, or infinity when there is none."""
        return float(self.max_batch_tokens) if self.max_batch_tokens else math.inf


@dataclass(frozen=True)
class QueueView:
    """What a policy sees each round."""

    idle: bool  # the decode batch is empty
    queued_rows: int  # rows the queued texts will take
    oldest_wait_s: float | None  # how long the head of the queue has waited; None when empty
    draining: bool  # the server is shutting down: no point waiting for more


@dataclass(frozen=True)
class Admission:
    """A policy's answer: how many queued texts may join now, and when to ask again if none."""

    count: int
    wait_s: float | None = None  # None: when something changes (or the worker's idle tick)


class AdmissionPolicy(Protocol):
    """Decides when queued texts join the decode batch."""

    mode: BatchingMode

    def admit(self, view: QueueView) -> Admission:
        """How many queued texts may join now."""
        ...


@dataclass(frozen=True)
class NoBatching:
    """One text at a time, decoded to completion."""

    mode: BatchingMode = BatchingMode.NONE

    def admit(self, view: QueueView) -> Admission:
        """One text when the batch is empty."""
        return Admission(1 if view.idle else 0)


@dataclass(frozen=True)
class DynamicBatching:
    """A full batch or the oldest text's delay, then decode to completion."""

    max_batch_size: int
    max_queue_delay_ms: float
    mode: BatchingMode = BatchingMode.DYNAMIC

    def admit(self, view: QueueView) -> Admission:
        """A batch when the previous one is done and this one is full, overdue, or we are draining."""
        if not view.idle or view.oldest_wait_s is None:
            return Admission(0)
        delay = self.max_queue_delay_ms / 1e3
        if view.draining or view.queued_rows >= self.max_batch_size or view.oldest_wait_s >= delay:
            return Admission(self.max_batch_size)
        return Admission(0, delay - view.oldest_wait_s)


@dataclass(frozen=True)
class ContinuousBatching:
    """Join before any step while rows are free."""

    max_batch_size: int
    mode: BatchingMode = BatchingMode.CONTINUOUS

    def admit(self, view: QueueView) -> Admission:
        """Always: as many as fit (the queue stops at the first that does not)."""
        return Admission(self.max_batch_size)


def make_policy(mode: BatchingMode | str, settings: SchedulerSettings) -> AdmissionPolicy:
    """The admission policy of a batching mode; ValueError for an unknown mode."""
    try:
        mode = BatchingMode(mode)
    except ValueError:
        names = ", ".join(m.value for m in BatchingMode)
        raise ValueError(f"unknown batching mode {mode!r}; choose one of {names}") from None
    if mode is BatchingMode.NONE:
        return NoBatching()
    if mode is BatchingMode.DYNAMIC:
        return DynamicBatching(settings.max_batch_size, settings.max_queue_delay_ms)
    return ContinuousBatching(settings.max_batch_size)
