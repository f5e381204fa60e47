"""A loaded model version: its runner and scheduler, its state, the leases of the requests using it; and the
records the repository answers with (an index line, what a lookup resolved)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.domain.text import shown
from service.models.layout import ModelSettings
from service.scheduling.control import SHUT_DOWN


class ModelState(StrEnum):
    """Lifecycle of a model version (the states Triton's RepositoryIndex reports)."""

    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class VersionState:
    """Where a model version is in its lifecycle and why (Triton's state and reason): the record the
    repository keeps per version and its index reports."""

    state: ModelState = ModelState.UNAVAILABLE
    reason: str = ""


@dataclass(frozen=True)
class IndexEntry:
    """One line of the repository index: a model version and its lifecycle record."""

    name: str
    version: str
    state: ModelState
    reason: str = ""


@dataclass
class ServedModel:
    """A loaded model version: what the loader built (runner, scheduler), what it costs, and its lifecycle
    record (`status`; `state` reads and writes it)."""

    name: str
    version: int
    runner: Any  # service.runtime.runner.Runner
    scheduler: Any  # service.scheduling.scheduler.Scheduler
    resident_bytes: int = 0  # its charge: the resident memory it holds serving (service/models/budget.py)
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    status: VersionState = field(default_factory=lambda: VersionState(ModelState.READY))
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set whenever no lease is held
    info: dict[str, str] = field(default_factory=dict)  # its `translator_model_info` (provider, ...)

    @property
    def state(self) -> ModelState:
        """Its lifecycle state: READY until retired, then UNLOADING, UNAVAILABLE once closed."""
        return self.status.state

    @state.setter
    def state(self, value: ModelState) -> None:
        """Move it to another lifecycle state."""
        self.status.state = value

    @property
    def ready(self) -> bool:
        """Whether it takes requests: READY, with a healthy scheduler."""
        return self.status.state is ModelState.READY and self.scheduler.healthy

    def acquire(self) -> None:
        """A request starts using it."""
        self.in_flight += 1
        self.idle.clear()
        self.last_used = time.monotonic()

    def release(self) -> None:
        """A request is done with it."""
        self.in_flight -= 1
        self.last_used = time.monotonic()
        if self.in_flight == 0:
            self.idle.set()

    async def close(self, grace_s: float, reason: str | None = None) -> None:
        """Wait up to grace_s for its leases, then drain and stop its worker (what is left fails, hearing
        that it stopped serving for `reason`; None: that the server shut down); its memory goes with the
        last reference."""
        why = (SHUT_DOWN if reason is None
               else f"model {shown(self.name)} version {self.version} stopped serving ({reason})")
        end = time.monotonic() + grace_s
        if self.in_flight:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), grace_s)
        await self.scheduler.drain(max(0.0, end - time.monotonic()), why)
        self.state = ModelState.UNAVAILABLE


@dataclass(frozen=True)
class Resolved:
    """What a request's (name, version) resolves to: the repository model, the version asked for (None:
    the latest) and the loaded version that serves it (None when none does)."""

    name: str
    version: int | None
    model: ServedModel | None


# (name, version, path, settings, charge) -> a started ServedModel; raises for a model that cannot be served.
# charge: what an earlier load of the same files was charged under a memory budget (None: measure it).
Loader = Callable[[str, int, Any, ModelSettings, int | None], Awaitable[ServedModel]]
