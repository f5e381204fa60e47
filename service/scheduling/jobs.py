"""A text in flight between the event loop and the inference worker, and what it comes back as.

A `Job` is created on the event loop (service/scheduling/scheduler.py), queued to and driven by the worker
thread (service/scheduling/worker.py), and answered through its sink: an asyncio Future (submit) or an
asyncio.Queue of events (stream). The worker collects what it has for its jobs in an `Outbox`, sent once per
iteration as one post to the `Mailbox` of each event loop, which wakes its loop with
`loop.call_soon_threadsafe` only when the loop has nothing pending from it: items posted while a wake-up is
pending ride along (fewer self-pipe writes and GIL handoffs when the loop lags behind the decode loop).
Asyncio objects are only ever touched by their own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from enum import StrEnum

from service.domain.types import Request, Result, TokenEvent

Delivery = TokenEvent | Result | BaseException  # what a job's caller receives


class RequestStatus(StrEnum):
    """Where a job is: QUEUED -> ACTIVE (under the queue lock) -> DONE; or QUEUED -> DONE."""

    QUEUED = "queued"  # waiting in the JobQueue
    ACTIVE = "active"  # taken by the worker: being encoded or decoded
    DONE = "done"  # answered, withdrawn or dropped: nothing more will be sent for it


@dataclass(eq=False)
class Job:
    """One text in flight: its request, where its results go, its deadline and timestamps (monotonic)."""

    request: Request
    loop: asyncio.AbstractEventLoop
    sink: asyncio.Future | asyncio.Queue  # Future for submit, Queue of events for stream
    deadline: float | None
    submitted: float
    state: RequestStatus = RequestStatus.QUEUED
    enqueued: float = 0.0
    admitted: float = 0.0
    first_token: float | None = None
    admit_step: int = 0
    first_token_step: int = 0  # the worker's decoder steps when the first token came back
    joins_previous: bool = False  # a later text of the same request as the job queued before it

    @property
    def rows(self) -> int:
        """Rows of the batch this text takes (its beam size)."""
        return self.request.options.rows

    def receive(self, item: Delivery, now: float) -> None:
        """On the event loop: hand an event, result or error to the waiting caller."""
        if isinstance(item, Result):
            item.timings.total_ms = (now - self.submitted) * 1e3
        sink = self.sink
        if isinstance(sink, asyncio.Queue):
            sink.put_nowait(item)
        elif not sink.done() and not isinstance(item, TokenEvent):
            if isinstance(item, BaseException):
                sink.set_exception(item)
            else:
                sink.set_result(item)


def deliver(items: list[tuple[Job, Delivery]]) -> None:
    """On the event loop: deliver a worker iteration's items in order."""
    now = time.monotonic()
    for job, item in items:
        job.receive(item, now)


class Mailbox:
    """Worker-to-loop deliveries in order, with at most one wake-up of the loop pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[Job, Delivery]] = []

    def post(self, items: list[tuple[Job, Delivery]]) -> None:
        """Worker thread: queue items for the loop; wake it unless a wake-up is already pending."""
        with self._lock:
            wake = not self._items
            self._items.extend(items)
        if wake:
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                with self._lock:
                    self._items.clear()

    def _drain(self) -> None:
        """On the event loop: deliver everything posted so far."""
        with self._lock:
            items, self._items = self._items, []
        deliver(items)


class Outbox:
    """Worker thread: (job, item) pairs collected during an iteration, then sent in one post per loop."""

    def __init__(self) -> None:
        self._items: list[tuple[Job, Delivery]] = []
        self._boxes: dict[asyncio.AbstractEventLoop, Mailbox] = {}

    def append(self, pair: tuple[Job, Delivery]) -> None:
        """Collect one item for a job."""
        self._items.append(pair)

    def extend(self, pairs: list[tuple[Job, Delivery]]) -> None:
        """Collect items for jobs."""
        self._items.extend(pairs)

    def send(self) -> None:
        """Post what was collected to the jobs' event loops, in order, one post per loop."""
        if not self._items:
            return
        items, self._items = self._items, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, Delivery]]] = {}
        for job, item in items:
            by_loop.setdefault(job.loop, []).append((job, item))
        for loop, batch in by_loop.items():
            self._mailbox(loop).post(batch)

    def _mailbox(self, loop: asyncio.AbstractEventLoop) -> Mailbox:
        """The mailbox of an event loop; forgets those of closed loops."""
        box = self._boxes.get(loop)
        if box is None:
            for old in [lp for lp in self._boxes if lp.is_closed()]:
                del self._boxes[old]
            box = self._boxes[loop] = Mailbox(loop)
        return box


class Waiters:
    """Futures of event loops waiting for a worker condition (idle, stopped); not thread-safe by itself."""

    def __init__(self) -> None:
        self._futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    def add(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
        """Wait with this future of this loop."""
        self._futures.append((loop, future))

    def resolve(self) -> None:
        """Resolve (on their loops) and forget every waiting future."""
        for loop, future in self._futures:
            with contextlib.suppress(RuntimeError):  # closed loop: nobody waits
                loop.call_soon_threadsafe(_resolve, future)
        self._futures.clear()


def _resolve(future: asyncio.Future) -> None:
    """On the event loop: resolve a waiter future unless it was cancelled."""
    if not future.done():
        future.set_result(None)
