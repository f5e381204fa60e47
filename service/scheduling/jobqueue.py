"""The inference worker's bounded FIFO of queued texts, and the rule for who joins the batch next.

A `JobQueue` holds `Job`s (service/scheduling/jobs.py) in arrival order and counts their rows. It has no lock
of its own: the worker (service/scheduling/worker.py) calls it under its condition's lock. `take` pops the
jobs that may join the decode batch now: FIFO while their rows fit (newcomers of mixed lengths may join
together: the batch encodes them in groups of similar length, service/runtime/decoding/encode_groups.py). With
a token budget (`--max-batch-tokens`), newcomers join only while the batch's tokens (every row's source plus
what it has decoded, service/runtime/decoding/batch.py `DecodeBatch.tokens`) and theirs (source x beam rows)
stay within it; into an empty batch the head joins whatever its length. The first job that may not join waits
at the head of the queue; nobody overtakes it, and the texts of one request (`joins_previous`) are never
separated. The one exception: while a Score runs, the score jobs keep their places and texts pass them. Jobs
whose deadline passed while queued leave with DeadlineExceeded."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from service.domain.errors import DeadlineExceeded, QueueFull
from service.domain.types import ScoreRequest
from service.scheduling.jobs import Job, RequestStatus


class JobQueue:
    """Bounded FIFO of queued jobs (texts) with their row count; not thread-safe by itself."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._jobs: deque[Job] = deque()
        self.rows = 0  # rows the queued jobs will take (a beam-k text takes k)

    def __len__(self) -> int:
        """Queued jobs."""
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        """Queued jobs, oldest first."""
        return iter(self._jobs)

    def oldest_wait(self, now: float) -> float | None:
        """Seconds the head of the queue has waited, None when empty."""
        return now - self._jobs[0].enqueued if self._jobs else None

    def put(self, jobs: list[Job], now: float) -> None:
        """Queue jobs at the back, all or none; QueueFull when they do not fit."""
        if len(self._jobs) + len(jobs) > self.size:
            raise QueueFull(f"request queue is full ({len(self._jobs)} of {self.size} texts "
                            f"queued, {len(jobs)} more requested); retry later")
        for j in jobs:
            j.enqueued = now
            self.rows += j.rows
        self._jobs.extend(jobs)

    def withdraw(self, job: Job) -> bool:
        """Take a queued job out (its caller gave up); False if it is not queued."""
        if job.state != RequestStatus.QUEUED:
            return False
        self._jobs.remove(job)
        self.rows -= job.rows
        job.state = RequestStatus.DONE
        return True

    def clear(self) -> list[Job]:
        """Empty the queue; the jobs it held, marked done."""
        jobs = list(self._jobs)
        self._jobs.clear()
        self.rows = 0
        for j in jobs:
            j.state = RequestStatus.DONE
        return jobs

    def take(self, limit: int, free_rows: int, now: float, free_tokens: float = math.inf,
             idle: bool = False, hold_scores: bool = False) -> tuple[list[Job], list[tuple[Job, Exception]]]:
        """Up to `limit` jobs that may join now (marked active), and the expired ones with their error.

        free_tokens: room left in the token budget; idle: the batch is empty (its head joins anyway);
        hold_scores: a Score is running, so score jobs keep their places and the texts behind them pass.
        """
        out: list[Job] = []
        expired: list[tuple[Job, Exception]] = []
        i = 0
        while i < len(self._jobs) and len(out) < limit:
            job = self._jobs[i]
            late = job.deadline is not None and now >= job.deadline
            if hold_scores and not late and isinstance(job.request, ScoreRequest):
                i += 1
                continue
            cost = len(job.request.source) * job.rows  # its rows hold its source each
            fits = job.rows <= free_rows and (cost <= free_tokens or job.joins_previous or (idle and not out))
            if not late and not fits:
                break  # FIFO: the head waits for rows or tokens, nobody overtakes it
            del self._jobs[i]
            self.rows -= job.rows
            if late:
                job.state = RequestStatus.DONE
                expired.append((job, DeadlineExceeded("deadline exceeded while queued")))
                continue
            job.state = RequestStatus.ACTIVE
            free_rows, free_tokens = free_rows - job.rows, free_tokens - cost
            out.append(job)
        return out, expired
