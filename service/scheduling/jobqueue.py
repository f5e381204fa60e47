"""The inference worker's bounded FIFO of queued texts, and the rule for who joins the batch next.

A `JobQueue` holds `Job`s (service/scheduling/jobs.py) in arrival order and counts their rows. It has no
lock of its own: the worker (service/scheduling/worker.py) calls it under its condition's lock. `take`
pops the jobs that may join the decode batch now: FIFO while their rows fit and, with an
`encoder_padding` limit, while the encoder input (every newcomer right-padded to the longest)
stays mostly real tokens: padding at most `encoder_padding` times the real tokens or
PAD_SLACK_TOKENS, whichever is more. The first job that would break the limit waits at the head
of the queue for the next encoder run (one long source padded with short ones costs several
times their separate encoder runs); nobody overtakes it, and the texts of one request
(`joins_previous`) are never separated for it. With a token budget (`--max-batch-tokens`),
newcomers also join only while the batch's tokens (every row's source plus what it has decoded,
service/runtime/batch.py `DecodeBatch.tokens`) and theirs (source x beam rows) stay within it; into an
empty batch the head joins whatever its length. Jobs whose deadline passed while queued leave
with DeadlineExceeded.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from service.domain.errors import DeadlineExceeded, QueueFull
from service.scheduling.jobs import Job, RequestStatus

PAD_SLACK_TOKENS = 32  # padding always tolerated in one encoder run, whatever encoder_padding says


class JobQueue:
    """Bounded FIFO of queued jobs (texts) with their row count; not thread-safe by itself."""

    def __init__(self, size: int, encoder_padding: float = math.inf) -> None:
        if not encoder_padding >= 0:
            raise ValueError(f"encoder_padding must be >= 0, got {encoder_padding}")
        self.size, self.encoder_padding = size, encoder_padding
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
             idle: bool = False) -> tuple[list[Job], list[tuple[Job, Exception]]]:
        """Up to `limit` jobs that may join now (marked active), and the expired ones with their error.

        free_tokens: room left in the token budget; idle: the batch is empty (its head joins anyway).
        """
        out: list[Job] = []
        expired: list[tuple[Job, Exception]] = []
        longest = real = 0  # source tokens of the jobs taken: the longest, and all of them
        while self._jobs and len(out) < limit:
            job = self._jobs[0]
            late = job.deadline is not None and now >= job.deadline
            n = len(job.request.source)
            cost = n * job.rows  # its rows hold its source each
            first = not out or job.joins_previous  # starts the encoder run, or a request's next text
            fits = (job.rows <= free_rows
                    and (first or self.pads_well(len(out) + 1, max(longest, n), real + n))
                    and (cost <= free_tokens or job.joins_previous or (idle and not out)))
            if not late and not fits:
                break  # FIFO: the head waits for rows (or for the next encoder run), nobody overtakes it
            self._jobs.popleft()
            self.rows -= job.rows
            if late:
                job.state = RequestStatus.DONE
                expired.append((job, DeadlineExceeded("deadline exceeded while queued")))
                continue
            job.state = RequestStatus.ACTIVE
            free_rows, free_tokens = free_rows - job.rows, free_tokens - cost
            longest, real = max(longest, n), real + n
            out.append(job)
        return out, expired

    def pads_well(self, count: int, longest: int, real: int) -> bool:
        """Whether `count` sources of `real` tokens in all, padded to `longest`, may share an encoder run."""
        return count * longest - real <= max(self.encoder_padding * real, PAD_SLACK_TOKENS)
