"""Failed loads: what a client may read of one, and when a request may load the model again.

A model whose load failed is not loaded again for a request until its backoff has passed: BACKOFF_FIRST_S
after a first failure, doubling with each consecutive one up to BACKOFF_CAP_S; until then requests are
refused at once with the recorded reason (NotReady). A successful load forgets the failures; an explicit
load (the repository API) always tries. One record per model of the repository, at most.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.domain.errors import NotReady, ServiceError, error_id
from service.domain.text import shown

log = logging.getLogger("service.models")
BACKOFF_FIRST_S = 1.0  # how long a request waits for another try after a model's first failed load
BACKOFF_CAP_S = 60.0  # the longest wait, however many loads failed in a row

Clock = Callable[[], float]  # seconds, monotonic


@dataclass(frozen=True)
class LoadFailure:
    """A model's last failed load: why (as a client may read it), when, how many failed in a row, when a
    request may load it again, and its serial number (which orders every failure recorded)."""

    reason: str
    at: float
    count: int
    retry_at: float
    serial: int


class LoadBackoff:
    """The failed loads of the repository's models, by model name, on an injectable clock."""

    def __init__(self, clock: Clock = time.monotonic, first_s: float = BACKOFF_FIRST_S,
                 cap_s: float = BACKOFF_CAP_S) -> None:
        """No failure yet; waits grow from first_s to cap_s."""
        self.clock, self.first_s, self.cap_s = clock, first_s, cap_s
        self.failures: dict[str, LoadFailure] = {}
        self._serials = itertools.count(1)
        self._last = 0  # serial of the last failure recorded

    def failed(self, name: str, reason: str) -> LoadFailure:
        """Record that a load of `name` failed for `reason`: its wait is twice the last one's (capped)."""
        count = self.failures[name].count + 1 if name in self.failures else 1
        now = self.clock()
        self._last = next(self._serials)
        wait = min(self.cap_s, self.first_s * 2 ** min(count - 1, 32))
        self.failures[name] = LoadFailure(reason, now, count, now + wait, self._last)
        return self.failures[name]

    def succeeded(self, name: str) -> None:
        """A load of `name` succeeded: its failures are forgotten."""
        self.failures.pop(name, None)

    def mark(self) -> int:
        """The serial of the last failure recorded (0: none), for `refusal(after=...)`."""
        return self._last

    def refusal(self, name: str, after: int | None = None) -> NotReady | None:
        """The answer to a request for `name` while its backoff runs (None: a request may load it); with
        `after` (a `mark`), the answer for a failure recorded since, backoff or not."""
        failure = self.failures.get(name)
        if failure is None:
            return None
        now = self.clock()
        if (failure.serial <= after) if after is not None else (now >= failure.retry_at):
            return None
        times = "once" if failure.count == 1 else f"{failure.count} times in a row"
        return NotReady(f"model {shown(name)} is not loaded ({failure.reason}); its load failed {times}: a "
                        f"request loads it again in {max(0.0, failure.retry_at - now):.1f} s, a load through "
                        "the repository API at once")


def client_reason(exc: BaseException, name: str) -> str:
    """What a client may read of a failed load: our own errors' messages (written for clients); of any
    other exception an error id, its text in the server log only."""
    if isinstance(exc, ServiceError):
        return str(exc)
    eid = error_id()
    log.error("model %s failed to load (error id %s)", name, eid, exc_info=exc)
    return f"internal error (error id {eid}; details in the server log)"
