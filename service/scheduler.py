"""Request schedulers: the asyncio face of the inference worker (service/worker.py).

API (used by the gRPC servicers)::

    sched = make_scheduler("continuous", runner, max_batch_size=32, max_queue_delay_ms=5.0,
                           queue_size=256, watchdog_s=30.0)          # ValueError for an unknown mode
    await sched.start()                                               # starts ONE worker thread
    results = await sched.submit(texts, DecodeOptions(...), deadline)  # list[Result], one per text
    async for item in sched.stream(text, options, deadline): ...      # TokenEvent..., then Result
    await sched.drain(grace_s)                                        # idempotent
    sched.healthy, sched.state, sched.queue_depth, sched.active_sequences, sched.mode,
    sched.max_batch_size, sched.max_batch_tokens, sched.max_queue_delay_ms, sched.queue_size,
    sched.watchdog_s, sched.encoder_padding  # make_scheduler(..., encoder_padding=x) overrides the mode's
    sched.fail_if_stuck()                   # polled by the server: stuck worker -> callers get UNAVAILABLE
    sched.limits                            # RequestLimits (service/limits.py): make_scheduler(..., limits=)

`deadline` is an absolute `time.monotonic()` value or None. `submit` tokenizes and validates
before queueing and raises InvalidInput (also for a beam wider than max_batch_size or more texts
than queue_size), NotReady (not started), QueueFull (the bounded queue counts queued texts; a
request is queued whole or not at all), ShuttingDown, DeadlineExceeded, BatchFailed (its batch
failed; the worker keeps going). If one text of a submit fails, the others are withdrawn. If the
awaiting task is cancelled (the gRPC client cancelled), CancelledError propagates and the texts
leave the queue or the batch, freeing their rows; `stream` does the same when the iterator is
closed early. Streaming forces `DecodeOptions.stream` (greedy only), and its events come from
the same decode loop as everything else.

`max_batch_size` counts rows in every mode: a beam-k text takes k rows. Modes differ only in
when queued texts join the batch (FIFO in all of them, nobody overtakes the head):
- `none`: one text at a time, decoded to completion.
- `dynamic`: when the batch is empty, wait until max_batch_size rows are queued or the oldest
  text waited max_queue_delay_ms, then encode and decode that batch to completion.
- `continuous` (default): before every decoder step, queued texts join while rows are free
  (one encoder run for the newcomers); finished ones have already left. The requests joining in
  one step must pad well together (encoder_padding 0.5: padding at most half the real tokens or
  32 tokens): a long source queued behind short ones joins one step later, in its own encoder
  run. The texts of one request are never split for that.
With `max_batch_tokens` (0 = none; the server's default is a budget) texts also join only while
the batch's rows hold at most that many tokens, source plus decoded so far: long texts then
share their steps with fewer others (a shorter tail for them, less throughput when the queue is
full of short ones); into an empty batch the head of the queue joins whatever its length.
All modes return the same tokens as `runner.translate([text])`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from service.errors import DeadlineExceeded, NotReady, ShuttingDown
from service.jobs import DONE, Job, Result, Timings
from service.limits import RequestLimits
from service.runner import Runner
from service.search import DecodeOptions, InvalidInput, Request, TokenEvent
from service.statistics import RequestTimer
from service.worker import Worker

log = logging.getLogger(__name__)

__all__ = ["MODES", "ContinuousScheduler", "DynamicScheduler", "NoBatchingScheduler", "Result", "Scheduler",
           "Timings", "make_scheduler"]


class Scheduler:
    """Queue + one inference worker thread; subclasses only decide when queued texts join the batch."""

    mode = ""
    default_encoder_padding = math.inf  # no limit: a batch is encoded together, however it pads

    def __init__(self, runner: Runner, *, max_batch_size: int = 32, max_queue_delay_ms: float = 5.0,
                 queue_size: int = 256, watchdog_s: float = 30.0, max_batch_tokens: int = 0,
                 encoder_padding: float | None = None, limits: RequestLimits | None = None) -> None:
        if max_batch_size < 1 or queue_size < 1:
            raise ValueError(f"max_batch_size and queue_size must be >= 1: {max_batch_size}, {queue_size}")
        if max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0 (0 = no limit), got {max_batch_tokens}")
        if max_queue_delay_ms < 0 or watchdog_s <= 0:
            raise ValueError(f"bad max_queue_delay_ms {max_queue_delay_ms} or watchdog_s {watchdog_s}")
        self.runner = runner
        self.limits = limits or RequestLimits.of(runner)  # source / output tokens per text
        self._max_batch_size, self._max_queue_delay_ms = int(max_batch_size), float(max_queue_delay_ms)
        padding = self.default_encoder_padding if encoder_padding is None else float(encoder_padding)
        self._worker = Worker(runner, self._admission, self._max_batch_size, int(queue_size),
                              float(watchdog_s), padding, int(max_batch_tokens) or math.inf)
        self._drain_task: asyncio.Future | None = None

    # ----- configuration and state ----------------------------------------------------------
    @property
    def max_batch_size(self) -> int:
        """Rows of the decode batch (a beam-k text takes k)."""
        return self._max_batch_size

    @property
    def max_batch_tokens(self) -> int:
        """Token budget of the decode batch (source + decoded so far, over its rows); 0 = none."""
        tokens = self._worker.max_tokens
        return int(tokens) if math.isfinite(tokens) else 0

    @property
    def max_queue_delay_ms(self) -> float:
        """Dynamic mode: how long the oldest queued text may wait for a batch to fill."""
        return self._max_queue_delay_ms

    @property
    def encoder_padding(self) -> float:
        """Newcomers of one encoder run: most padding as a fraction of their real tokens (inf: no limit)."""
        return self._worker.encoder_padding

    @property
    def queue_size(self) -> int:
        """Most texts that may wait in the queue."""
        return self._worker.queue_size

    @property
    def watchdog_s(self) -> float:
        """An encoder run or decoder step longer than this makes the scheduler unhealthy."""
        return self._worker.watchdog_s

    @property
    def healthy(self) -> bool:
        """Worker thread alive, not shutting down, and not stuck in one step beyond the watchdog limit."""
        return self._worker.healthy

    @property
    def state(self) -> str:
        """"new", "running", "draining" (finishing in-flight work), "stopping" or "stopped"."""
        w = self._worker
        if w.stopped:
            return "stopped"
        if w.stopping:
            return "stopping"
        if w.draining:
            return "draining"
        return "running" if w.started else "new"

    @property
    def queue_depth(self) -> int:
        """Texts waiting in the queue."""
        return self._worker.queue_depth

    def fail_if_stuck(self) -> int:
        """While a model run is stuck beyond watchdog_s, answer every queued and active caller with
        UNAVAILABLE (NotReady) rather than let them hang; the number answered (the server polls this)."""
        return self._worker.fail_if_stuck()

    @property
    def active_sequences(self) -> int:
        """Texts being decoded."""
        return self._worker.active_sequences

    def _admission(self, idle: bool, queued_rows: int, oldest_wait_s: float | None,
                   draining: bool) -> tuple[int, float | None]:
        """Worker thread: how many queued texts may join now, and how long to wait if none (None: any)."""
        raise NotImplementedError

    # ----- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the inference worker thread (a second call does nothing)."""
        if self._worker.draining:
            raise ShuttingDown("the scheduler was drained and cannot be restarted")
        self._worker.start()
        log.info("%s scheduler started: max_batch_size=%d rows, max_batch_tokens=%s, max_queue_delay_ms=%g, "
                 "queue_size=%d", self.mode, self.max_batch_size, self.max_batch_tokens or "no limit",
                 self.max_queue_delay_ms, self.queue_size)

    async def drain(self, grace_s: float) -> None:
        """Refuse new work, let in-flight and queued work finish within grace_s, fail the rest, stop."""
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain(grace_s))
        await asyncio.shield(self._drain_task)

    async def _drain(self, grace_s: float) -> None:
        """The body of drain(), run once."""
        loop, w = asyncio.get_running_loop(), self._worker
        w.begin_drain()
        try:
            await asyncio.wait_for(w.idle_future(loop), max(0.0, grace_s))
        except TimeoutError:
            log.warning("drain: work still in flight after %gs; failing it with ShuttingDown", grace_s)
        try:
            await asyncio.wait_for(w.stop(loop), w.watchdog_s)
        except TimeoutError:
            log.error("drain: the inference worker did not stop within %gs", w.watchdog_s)
            w.abort()

    # ----- requests -------------------------------------------------------------------------
    def _jobs(self, texts: Sequence[str], options: DecodeOptions, deadline: float | None,
              stream: bool) -> list[Job]:
        """Tokenize and validate texts into jobs (not queued yet)."""
        if not self._worker.started:
            raise NotReady("the scheduler is not started")
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidInput("texts must be a sequence of strings")
        if not isinstance(options, DecodeOptions):
            raise InvalidInput(f"options must be DecodeOptions, got {type(options).__name__}")
        if len(texts) > self.queue_size:
            raise InvalidInput(f"{len(texts)} texts in one request; at most {self.queue_size} are accepted")
        submitted = time.monotonic()
        if deadline is not None and deadline <= submitted:
            raise DeadlineExceeded("the deadline passed before the request was queued")
        self.limits.check_texts(texts)  # before tokenizing: a huge text costs nothing
        resolved = self.limits.outputs(options, options.resolved(self.runner.max_len, self.runner.max_beam))
        if resolved.beam_size > self.max_batch_size:
            raise InvalidInput(f"beam_size {resolved.beam_size} exceeds the batch size {self.max_batch_size}")
        loop = asyncio.get_running_loop()
        jobs = []
        sources = self.runner.encode_texts(texts)
        self.limits.check_sources(sources)
        for ids in sources:
            request = Request(ids, resolved)  # ids come from our tokenizer: in vocabulary, length checked
            sink: asyncio.Future | asyncio.Queue = asyncio.Queue() if stream else loop.create_future()
            request.tag = Job(request, loop, sink, deadline, submitted, joins_previous=bool(jobs))
            jobs.append(request.tag)
        return jobs

    async def submit(self, texts: Sequence[str], options: DecodeOptions,
                     deadline: float | None = None) -> list[Result]:
        """Decode texts; one Result per text, in order (see the module docstring for errors)."""
        with RequestTimer() as timer:
            jobs = self._jobs(texts, options, deadline, stream=False)
            if not jobs:
                return []
            self._worker.enqueue(jobs)
            futures = [j.sink for j in jobs]
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    if len(futures) == 1:
                        results = [await futures[0]]
                    else:
                        results = list(await asyncio.gather(*futures))
            except TimeoutError:
                raise DeadlineExceeded("deadline exceeded before the result was ready") from None
            finally:
                unfinished = [j for j, f in zip(jobs, futures, strict=True)
                              if j.state != DONE or not f.done()]
                if unfinished:
                    for f in futures:
                        f.cancel()  # a later delivery is ignored; no "exception never retrieved"
                    self._worker.abandon(unfinished)
            timer.succeeded(jobs, results)
            return results

    async def stream(self, text: str, options: DecodeOptions,
                     deadline: float | None = None) -> AsyncIterator[TokenEvent | Result]:
        """Greedy-decode one text: a TokenEvent per generated token, then the Result."""
        if not isinstance(options, DecodeOptions):
            raise InvalidInput(f"options must be DecodeOptions, got {type(options).__name__}")
        with RequestTimer() as timer:
            (job,) = self._jobs([text], dataclasses.replace(options, stream=True), deadline, stream=True)
            self._worker.enqueue([job])
            events: asyncio.Queue = job.sink
            when = _loop_time(deadline)
            try:
                for _ in range(job.request.options.max_new_tokens + 1):  # tokens (at most), then the result
                    try:
                        async with asyncio.timeout_at(when):
                            item = await events.get()
                    except TimeoutError:
                        raise DeadlineExceeded("deadline exceeded before the stream finished") from None
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, Result):
                        timer.succeeded([job], [item])
                    yield item
                    if isinstance(item, Result):
                        return
                raise RuntimeError("stream produced more events than max_new_tokens")
            finally:
                if job.state != DONE:
                    self._worker.abandon([job])


def _loop_time(deadline: float | None) -> float | None:
    """A time.monotonic() deadline on the running loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


class NoBatchingScheduler(Scheduler):
    """One text at a time, decoded to completion."""

    mode = "none"

    def _admission(self, idle: bool, queued_rows: int, oldest_wait_s: float | None,
                   draining: bool) -> tuple[int, float | None]:
        """One text when the batch is empty."""
        return (1 if idle else 0), None


class DynamicScheduler(Scheduler):
    """Triton-style dynamic batching: a full batch or the oldest text's delay, then decode to completion."""

    mode = "dynamic"

    def _admission(self, idle: bool, queued_rows: int, oldest_wait_s: float | None,
                   draining: bool) -> tuple[int, float | None]:
        """A batch when the previous one is done and this one is full, overdue, or we are draining."""
        if not idle or oldest_wait_s is None:
            return 0, None
        delay = self.max_queue_delay_ms / 1e3
        if draining or queued_rows >= self.max_batch_size or oldest_wait_s >= delay:
            return self.max_batch_size, None
        return 0, delay - oldest_wait_s


class ContinuousScheduler(Scheduler):
    """Iteration-level (Orca / vLLM-style) batching: join before any step while rows are free."""

    mode = "continuous"
    default_encoder_padding = 0.5  # joining one step later costs less than a long pad

    def _admission(self, idle: bool, queued_rows: int, oldest_wait_s: float | None,
                   draining: bool) -> tuple[int, float | None]:
        """Always: as many as fit (the worker stops at the first that does not)."""
        return self.max_batch_size, None


MODES: dict[str, type[Scheduler]] = {
    "none": NoBatchingScheduler, "dynamic": DynamicScheduler, "continuous": ContinuousScheduler,
}


def make_scheduler(mode: str, runner: Runner, **kwargs: Any) -> Scheduler:
    """A scheduler of the given mode ("none", "dynamic", "continuous"); ValueError for another."""
    if mode not in MODES:
        raise ValueError(f"unknown batching mode {mode!r}; choose one of {', '.join(MODES)}")
    return MODES[mode](runner, **kwargs)
