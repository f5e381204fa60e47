"""The inference worker as the event loop sees it: its state, and what the loop calls on it.

`WorkerControl` holds what the event loop and the worker thread (service/scheduling/worker.py) share: the
bounded `JobQueue` and the flags guarded by one `threading.Condition`, the decode batch, the outbox and the
waiters. The loop queues jobs (`enqueue`), withdraws those whose callers gave up (`abandon`), drains and stops
the thread, and answers callers itself when a model run is stuck (`fail_if_stuck`, `abort`); it never waits on
inference. The thread's loop is `Worker._run`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from service.domain.errors import NotReady, ShuttingDown
from service.ops.model_metrics import ModelMetrics
from service.runtime.decoding.batch import DecodeBatch
from service.runtime.decoding.scoring import Scorer, ScoreWork
from service.scheduling.jobqueue import JobQueue
from service.scheduling.jobs import Delivery, Job, Mailbox, Outbox, RequestStatus, Waiters
from service.scheduling.policies import AdmissionPolicy, SchedulerSettings

log = logging.getLogger(__name__)
SHUT_DOWN = "the server shut down"  # why a stop fails what is left, unless the stop says otherwise


class WorkerControl:
    """The state of the thread that owns a DecodeBatch (and a Scorer), and the event loop's calls on it."""

    def __init__(self, batch: DecodeBatch, policy: AdmissionPolicy, settings: SchedulerSettings,
                 recorder: ModelMetrics, scorer: Scorer | None = None) -> None:
        if batch.max_rows != settings.max_batch_size:
            raise ValueError(f"a batch of {batch.max_rows} rows for max_batch_size {settings.max_batch_size}")
        self._queue = JobQueue(settings.queue_size)  # guarded by _cond
        self.batch, self.policy, self.recorder = batch, policy, recorder
        self.scorer = scorer  # runs the score jobs (service/runtime/decoding/scoring.py); None: none queued
        self.watchdog_s, self.max_tokens = settings.watchdog_s, settings.token_budget
        self._cond = threading.Condition()
        self._dropped: list[Job] = []  # active jobs whose caller gave up (cancelled, timed out)
        self._timed: set[Job] = set()  # active jobs that have a deadline
        self._fresh: list[Job] = []  # admitted, no token yet
        self._outbox = Outbox()
        self._idle_waiters, self._stop_waiters = Waiters(), Waiters()  # guarded by _cond
        self.draining = self.stopping = self.stopped = False
        self.crashed = False  # the thread died of an exception (see _run)
        self._in_hand: list[Job] = []  # popped from the queue, not in the batch yet
        self._scoring: ScoreWork | None = None  # the score jobs being run, and their index in it
        self._scored: dict[Job, int] = {}
        self._score_s = self._decode_s = 0.0  # seconds of Score runs, and of decoding, since it began
        self._score_total = 0.0  # seconds of the ScoreWork's runs
        self._stuck_failed = False  # fail_if_stuck() already answered the callers of this stuck run
        self.stop_why = SHUT_DOWN  # what the callers failed by a stop hear first
        self._busy_since: float | None = None
        self._steps = 0
        self._gauges = (-1, -1)
        self._thread: threading.Thread | None = None

    # ----- called from the event loop -----------------------------------------------------
    @property
    def started(self) -> bool:
        """The thread was started."""
        return self._thread is not None

    @property
    def healthy(self) -> bool:
        """Thread alive, not stopping, and no add/step running longer than the watchdog limit."""
        if self._thread is None or not self._thread.is_alive() or self.stopping:
            return False
        busy = self._busy_since
        return busy is None or time.monotonic() - busy < self.watchdog_s

    @property
    def stuck(self) -> bool:
        """An encoder run or decoder step has been running for longer than the watchdog limit."""
        busy = self._busy_since
        return busy is not None and time.monotonic() - busy >= self.watchdog_s

    @property
    def queue_depth(self) -> int:
        """Texts waiting in the queue."""
        return len(self._queue)

    @property
    def active_sequences(self) -> int:
        """Texts in the decode batch."""
        return len(self.batch)

    def start(self) -> None:
        """Start the worker thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="inference-worker", daemon=True)
            self._thread.start()

    def enqueue(self, jobs: list[Job]) -> None:
        """Queue jobs at the back, all or none; ShuttingDown when draining, QueueFull when full."""
        with self._cond:
            if self.crashed:
                raise NotReady("the inference worker stopped unexpectedly; this server cannot translate")
            if self.draining or self.stopping:
                raise ShuttingDown("the server is shutting down and accepts no new requests")
            if self.stuck:
                raise NotReady(f"the inference worker is stuck (one model run has taken over "
                               f"{self.watchdog_s:g} s); retry later or elsewhere")
            self._queue.put(jobs, time.monotonic())  # QueueFull when they do not fit
            self.recorder.gauges(len(self._queue), len(self.batch))
            self._cond.notify()

    def abandon(self, jobs: list[Job]) -> None:
        """The callers of these jobs stopped waiting: take them out of the queue or the batch."""
        with self._cond:
            for j in jobs:
                if not self._queue.withdraw(j) and j.state == RequestStatus.ACTIVE:
                    self._dropped.append(j)
            self._cond.notify()

    def begin_drain(self) -> None:
        """Accept no new jobs; queued and active ones go on."""
        with self._cond:
            self.draining = True
            self._cond.notify()

    def idle_future(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """A future resolved when the queue and the batch are both empty (while draining)."""
        fut = loop.create_future()
        with self._cond:
            if self._thread is None or not (len(self._queue) or len(self.batch) or self._scoring):
                fut.set_result(None)
            else:
                self._idle_waiters.add(loop, fut)
                self._cond.notify()
        return fut

    def stop(self, loop: asyncio.AbstractEventLoop, why: str = SHUT_DOWN) -> asyncio.Future:
        """Ask the thread to fail what is left with ShuttingDown (its message starting with `why`) and exit;
        resolved when it did."""
        fut = loop.create_future()
        with self._cond:
            self.draining = self.stopping = True
            self.stop_why = why
            if self._thread is None or self.stopped:
                fut.set_result(None)
            else:
                self._stop_waiters.add(loop, fut)
            self._cond.notify()
        return fut

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the stopped thread to end, so that what its frames held (the model's
        sessions among it) is released; whether it ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def fail_if_stuck(self) -> int:
        """From the loop: while a model run is stuck beyond the watchdog limit, answer every queued and
        active caller with UNAVAILABLE instead of letting them hang (once per stuck run); how many."""
        if not self.stuck:
            self._stuck_failed = False
            return 0
        if self._stuck_failed:
            return 0
        with self._cond:
            queued = self._queue.clear()
            # list() copies atomically; the stuck thread is not changing the batch meanwhile
            held = (*self._in_hand, *(r.tag for r in self.batch.requests), *self._scored)
            active = [j for j in held if j.state == RequestStatus.ACTIVE]
            self._stuck_failed = True
        message = (f"the inference worker is stuck (one model run has taken over {self.watchdog_s:g} s); "
                   "this request was given up, retry later or elsewhere")
        log.error("inference worker stuck for over %gs: failing %d queued and %d active text(s)",
                  self.watchdog_s, len(queued), len(active))
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, Delivery]]] = {}
        for j in [*queued, *active]:  # active ones stay ACTIVE: callers abandon them, the worker drops them
            by_loop.setdefault(j.loop, []).append((j, NotReady(message)))
        for loop, items in by_loop.items():
            Mailbox(loop).post(items)
        return len(queued) + len(active)

    def abort(self) -> None:
        """From the loop, when the thread is stuck: fail every job still waiting with ShuttingDown."""
        with self._cond:
            jobs = [*self._queue, *(r.tag for r in self.batch.requests), *self._scored]
        now = time.monotonic()
        for j in jobs:
            j.receive(ShuttingDown("the server shut down: its inference worker is stuck"), now)

    def _run(self) -> None:
        """Thread body (Worker._run)."""
        raise NotImplementedError
