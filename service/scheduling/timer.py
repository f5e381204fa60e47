"""Times each scheduler request into the model statistics (service/ops/statistics.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

from service.domain.types import Result
from service.ops.statistics import ModelStatistics
from service.scheduling.jobs import Job


class RequestTimer:
    """Times one scheduler request; on leaving the with-block records it as a success or a failure.

    Call `succeeded(jobs, results)` when the results are ready: the request then counts as a
    success even if the block is left by an exception afterwards (a stream closed after its
    final result). Leaving by an exception before that counts a failure; leaving quietly
    without results (nothing to do) counts nothing.
    """

    def __init__(self, stats: ModelStatistics) -> None:
        """Time into `stats`, the model version's statistics."""
        self.stats = stats
        self.started = time.monotonic()
        self._done = False

    def __enter__(self) -> RequestTimer:
        """Start timing now."""
        self.started = time.monotonic()
        return self

    def succeeded(self, jobs: Sequence[Job], results: Sequence[Result]) -> None:
        """The request's texts (with their enqueue / admission times) and results are ready."""
        now = time.monotonic()
        if not jobs:
            return
        enqueued = min(j.enqueued for j in jobs)
        first_admitted = min(j.admitted for j in jobs)
        pairs = zip(jobs, results, strict=True)
        last_finished = max(j.admitted + r.timings.compute_ms / 1e3 for j, r in pairs)
        last_finished = min(max(last_finished, first_admitted), now)  # ms round trip: stay ordered
        self.stats.record_success(len(jobs), enqueued - self.started, first_admitted - enqueued,
                                  last_finished - first_admitted, now - last_finished)
        self._done = True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Record a failure if the request ended with an error before its results."""
        if exc_type is not None and not self._done:
            self.stats.record_failure(time.monotonic() - self.started)
