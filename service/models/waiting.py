"""Requests waiting for a load of their model (on-demand mode), and the leases the load hands them.

The load that brings a model leases each waiting request the version it addresses in the same step that
starts serving it (`grant`, from the repository's switch): no other load's eviction can come between, so
a request that waited for a load gets the model that load brought.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass

from service.domain.errors import DeadlineExceeded
from service.models.failures import LoadBackoff
from service.models.served import ServedModel


@dataclass
class Waiter:
    """A request waiting for a load: the version it addresses (None: the latest) and the one leased to it
    (None until the load starts serving, or when that load serves no such version)."""

    version: int | None
    model: ServedModel | None = None

    def grant(self, versions: Mapping[int, ServedModel]) -> None:
        """Lease the addressed version of `versions` (just loaded), if they have it and none is leased yet."""
        if self.model is None and versions:
            self.model = versions.get(max(versions) if self.version is None else self.version)
            if self.model is not None:
                self.model.acquire()


class Waiters:
    """The requests waiting for loads, by model name (none left once they have their answer)."""

    def __init__(self, failures: LoadBackoff) -> None:
        """No request waiting; `failures` answers the requests whose load failed."""
        self.failures = failures
        self.waiting: dict[str, list[Waiter]] = {}

    async def wait(self, name: str, version: int | None, load: Awaitable[None], deadline: float | None
                   ) -> ServedModel | None:
        """Wait for `load` of model `name` within a request's deadline (the load goes on for the others):
        the version the request addresses, leased to it (None: the load serves no such version).
        DeadlineExceeded when the deadline passes; NotReady with the reason when the load fails now."""
        waiter, seen = Waiter(version), self.failures.mark()
        self.waiting.setdefault(name, []).append(waiter)
        task = asyncio.ensure_future(load)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved if none waits any more
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except BaseException as exc:
            if waiter.model is not None:  # leased as the deadline passed or the request was cancelled
                waiter.model.release()
            if isinstance(exc, TimeoutError):
                raise DeadlineExceeded("the deadline passed while the model was loading") from exc
            if isinstance(exc, Exception) and (refused := self.failures.refusal(name, seen)) is not None:
                raise refused from exc
            raise
        finally:
            self.waiting[name].remove(waiter)
            if not self.waiting[name]:
                del self.waiting[name]
        return waiter.model

    def grant(self, name: str, versions: Mapping[int, ServedModel]) -> None:
        """`versions` of `name` start serving: lease each waiting request the version it addresses."""
        for waiter in self.waiting.get(name, []):
            waiter.grant(versions)
