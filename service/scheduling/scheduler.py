"""The scheduler: the asyncio face of the inference worker (service/scheduling/worker.py).

API (used by the gRPC servicers)::

    sched = make_scheduler("continuous", runner, max_batch_size=32, queue_size=256)  # ValueError: bad mode
    sched = make_scheduler("continuous", runner, cache=SentenceCache(64 << 20))      # with a sentence cache
    await sched.start()                                               # starts ONE worker thread
    results = await sched.submit(texts, DecodeOptions(...), deadline)  # list[Result], one per text
    async for item in sched.stream(text, options, deadline): ...      # TokenEvent..., then Result
    scores = await sched.score(sources, targets, ScoreOptions(...), deadline)  # list[ScoreResult], per pair
    await sched.drain(grace_s)                                        # idempotent
    sched.settings, sched.policy, sched.mode, sched.limits            # what it was built with
    sched.healthy, sched.state, sched.queue_depth, sched.active_sequences
    sched.fail_if_stuck()                   # polled by the server: stuck worker -> callers get UNAVAILABLE

`deadline` is an absolute `time.monotonic()` value or None. `submit` resolves the options once against the
`RequestLimits` (service/domain/limits.py; the languages of a many-to-many model too: the source's language
prefix, the forced first token), then per text (`RequestLimits.for_text`: the glossary terms a text holds
become its required phrases), tokenizes and validates before queueing, and raises InvalidInput (also for a
beam wider than max_batch_size or more texts than queue_size), NotReady (not started), QueueFull (the bounded
queue counts queued texts; a request is queued whole or not at all), ShuttingDown, DeadlineExceeded,
BatchFailed (its batch failed; the worker keeps going). If one text of a submit fails, the others are
withdrawn. If the awaiting task is cancelled (the gRPC client cancelled), CancelledError propagates and the
texts leave the queue or the batch, freeing their rows; `stream` does the same when the iterator is closed
early. Streaming forces `DecodeOptions.stream` (greedy only), and its events come from the same decode loop as
everything else. `score` validates its pairs (service/runtime/decoding/scoring.py) and queues one job per
pair, admitted, timed out, withdrawn and drained as a text is; the worker scores them by forced decoding.

`max_batch_size` counts rows in every mode: a beam-k text takes k rows. Modes differ only in their admission
policy (service/scheduling/policies.py); FIFO in all of them, nobody overtakes the head; texts of mixed
lengths joining together are encoded in groups of similar length (service/runtime/decoding/encode_groups.py).
With `max_batch_tokens` (0 = none; the server's default is a budget) texts also join only while the batch's
rows hold at most that many tokens, source plus decoded so far; into an empty batch the head of the queue
joins whatever its length. All modes return the same tokens as `runner.translate([text])`.

With a `SentenceCache` (service/scheduling/cache.py, the server's one), `submit` looks each text up after
validating and tokenizing, queues only the misses (as one request) and keeps their results; a hit is answered
without decoding (its Timings: no queue or compute time). Streams and sampling without a seed bypass it; a
draining scheduler looks nothing up, and drops its entries once stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from enum import StrEnum
from typing import Any

from service.domain.errors import DeadlineExceeded, InvalidInput, NotReady, ShuttingDown
from service.domain.limits import AS_DOCUMENT, RequestLimits
from service.domain.types import (
    BatchingMode,
    DecodeOptions,
    Request,
    ResolvedOptions,
    Result,
    ScoreOptions,
    ScoreResult,
    TokenEvent,
)
from service.ops.model_metrics import ModelMetrics
from service.runtime.runner import Runner
from service.scheduling.cache import SentenceCache, new_owner
from service.scheduling.control import SHUT_DOWN
from service.scheduling.jobs import Job, RequestStatus
from service.scheduling.policies import AdmissionPolicy, SchedulerSettings, make_policy
from service.scheduling.timer import RequestTimer
from service.scheduling.worker import Worker

log = logging.getLogger(__name__)


class SchedulerState(StrEnum):
    """Lifecycle of a scheduler."""

    NEW = "new"  # built, worker not started
    RUNNING = "running"
    DRAINING = "draining"  # finishing in-flight work, accepting none
    STOPPING = "stopping"  # failing what is left
    STOPPED = "stopped"


class Scheduler:
    """Bounded queue + one inference worker thread, admitting texts by its policy."""

    def __init__(self, runner: Runner, policy: AdmissionPolicy, settings: SchedulerSettings | None = None,
                 limits: RequestLimits | None = None, recorder: ModelMetrics | None = None,
                 cache: SentenceCache | None = None) -> None:
        self.settings = settings or SchedulerSettings()
        self.recorder = recorder or ModelMetrics()  # the model version's metrics and statistics
        self.cache, self.cache_owner = cache, new_owner()  # the server's sentence cache; this copy's entries
        self.policy, self.runner = policy, runner
        self.limits = limits or runner.limits()
        rows = self.settings.max_batch_size
        self._worker = Worker(runner.new_batch(rows), policy, self.settings, self.recorder,
                              runner.new_scorer(rows))
        self._drain_task: asyncio.Future | None = None

    # ----- state ----------------------------------------------------------------------------
    @property
    def mode(self) -> BatchingMode:
        """The batching mode of its admission policy."""
        return self.policy.mode

    @property
    def healthy(self) -> bool:
        """Worker thread alive, not shutting down, and not stuck in one step beyond the watchdog limit."""
        return self._worker.healthy

    @property
    def state(self) -> SchedulerState:
        """Where the scheduler is in its lifecycle."""
        w = self._worker
        if w.stopped:
            return SchedulerState.STOPPED
        if w.stopping:
            return SchedulerState.STOPPING
        if w.draining:
            return SchedulerState.DRAINING
        return SchedulerState.RUNNING if w.started else SchedulerState.NEW

    @property
    def queue_depth(self) -> int:
        """Texts waiting in the queue."""
        return self._worker.queue_depth

    @property
    def active_sequences(self) -> int:
        """Texts being decoded."""
        return self._worker.active_sequences

    def fail_if_stuck(self) -> int:
        """While a model run is stuck beyond watchdog_s, answer every queued and active caller with
        UNAVAILABLE (NotReady) rather than let them hang; the number answered (the server polls this)."""
        return self._worker.fail_if_stuck()

    # ----- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the inference worker thread (a second call does nothing)."""
        if self._worker.draining:
            raise ShuttingDown("the scheduler was drained and cannot be restarted")
        self._worker.start()
        s = self.settings
        log.info("%s scheduler started: max_batch_size=%d rows, max_batch_tokens=%s, max_queue_delay_ms=%g, "
                 "queue_size=%d", self.mode, s.max_batch_size, s.max_batch_tokens or "no limit",
                 s.max_queue_delay_ms, s.queue_size)

    async def drain(self, grace_s: float, why: str = SHUT_DOWN) -> None:
        """Refuse new work, let in-flight and queued work finish within grace_s, fail the rest (ShuttingDown,
        its message starting with `why`), stop."""
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._drain(grace_s, why))
        await asyncio.shield(self._drain_task)

    async def _drain(self, grace_s: float, why: str) -> None:
        """The body of drain(), run once."""
        loop, w = asyncio.get_running_loop(), self._worker
        w.begin_drain()
        try:
            await asyncio.wait_for(w.idle_future(loop), max(0.0, grace_s))
        except TimeoutError:
            log.warning("drain: work still in flight after %gs; failing it with ShuttingDown", grace_s)
        try:
            await asyncio.wait_for(w.stop(loop, why), w.watchdog_s)
            await asyncio.to_thread(w.join, w.watchdog_s)  # its memory goes before drain returns
        except TimeoutError:
            log.error("drain: the inference worker did not stop within %gs", w.watchdog_s)
            w.abort()
        finally:
            if self.cache is not None:
                self.cache.drop(self.cache_owner)

    # ----- requests -------------------------------------------------------------------------
    def _jobs(self, texts: Sequence[str], options: DecodeOptions, deadline: float | None,
              stream: bool) -> list[Job]:
        """Tokenize and validate texts into jobs (not queued yet)."""
        each, sources, submitted = self._sources(texts, options, deadline)
        return self._make_jobs(sources, each, deadline, submitted, stream)

    def _sources(self, texts: Sequence[str], options: DecodeOptions,
                 deadline: float | None) -> tuple[list[ResolvedOptions], list[list[int]], float]:
        """Validate a request and tokenize its texts: each text's resolved options (the request's, with the
        glossary terms the text holds as its required phrases), source ids, and when it was submitted."""
        if not self._worker.started:
            raise NotReady("the scheduler is not started")
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidInput("texts must be a sequence of strings")
        if not isinstance(options, DecodeOptions):
            raise InvalidInput(f"options must be DecodeOptions, got {type(options).__name__}")
        queue_size, max_batch_size = self.settings.queue_size, self.settings.max_batch_size
        if len(texts) > queue_size:
            raise InvalidInput(f"{len(texts)} texts in one request; at most {queue_size} are accepted")
        submitted = time.monotonic()
        if deadline is not None and deadline <= submitted:
            raise DeadlineExceeded("the deadline passed before the request was queued")
        self.limits.check_texts(texts)  # before tokenizing: a huge text costs nothing
        resolved = self.limits.resolve(options, self.runner.encode_target)  # the one place: resolved once
        if resolved.rows > max_batch_size:
            raise InvalidInput(f"{resolved.rows} rows (beam_size, or n_best alternatives) exceed the batch "
                               f"size {max_batch_size}")
        sources = self.runner.encode_texts(texts, resolved.source_prefix, resolved.task_prefix)
        self.limits.check_sources(sources, AS_DOCUMENT)
        each = [self.limits.for_text(resolved, text, self.runner.encode_target) for text in texts]
        return each, sources, submitted

    def _make_jobs(self, sources: Sequence[list[int]], each: Sequence[ResolvedOptions],
                   deadline: float | None, submitted: float, stream: bool) -> list[Job]:
        """One job per source with its options, the later ones joining the first (queued whole or not at
        all)."""
        loop = asyncio.get_running_loop()
        jobs: list[Job] = []
        for ids, options in zip(sources, each, strict=True):
            request = Request(ids, options)  # ids come from our tokenizer: in vocabulary, length checked
            sink: asyncio.Future | asyncio.Queue = asyncio.Queue() if stream else loop.create_future()
            request.tag = Job(request, loop, sink, deadline, submitted, joins_previous=bool(jobs))
            jobs.append(request.tag)
        return jobs

    async def submit(self, texts: Sequence[str], options: DecodeOptions,
                     deadline: float | None = None) -> list[Result]:
        """Decode texts; one Result per text, in order (see the module docstring for errors); texts the
        sentence cache holds are answered from it, not decoded."""
        with RequestTimer(self.recorder.stats) as timer:
            each, sources, submitted = self._sources(texts, options, deadline)
            cache = None if self._worker.draining else self.cache  # a draining scheduler answers nothing
            keys = None if cache is None else cache.keys(self.cache_owner, each, sources)  # each text's own
            if cache is None or keys is None:
                jobs = self._make_jobs(sources, each, deadline, submitted, stream=False)
                return await self._wait(jobs, deadline, timer)
            looking = time.monotonic()
            results = [cache.get(key, bool(options.return_alignment)) for key in keys]
            misses = [i for i, result in enumerate(results) if result is None]
            self.recorder.cache_lookups(len(results) - len(misses), len(misses))
            hits = [result for result in results if result is not None]
            if not misses:  # every text answered from the cache: a cache hit in Triton's statistics
                self.recorder.stats.record_cache_hit(time.monotonic() - submitted)
                return _answered(hits, submitted)
            looked = time.monotonic() - looking
            jobs = self._make_jobs([sources[i] for i in misses], [each[i] for i in misses], deadline,
                                   submitted, stream=False)
            decoded = await self._wait(jobs, deadline, timer)
            storing = time.monotonic()
            for i, result in zip(misses, decoded, strict=True):
                cache.put(keys[i], result)
                results[i] = result
            self.recorder.stats.record_cache_miss(looked + time.monotonic() - storing)
            _answered(hits, submitted)  # ready when the request's last decoded text is
            return results  # every None was a miss, now decoded

    async def score(self, sources: Sequence[str], targets: Sequence[str], options: ScoreOptions | None = None,
                    deadline: float | None = None) -> list[ScoreResult]:
        """Score each target given its source (forced decoding); one ScoreResult per pair, in order.
        InvalidInput for no pair, lists of different lengths, more pairs than queue_size, a text too long."""
        with RequestTimer(self.recorder.stats) as timer:
            jobs = self._score_jobs(sources, targets, options or ScoreOptions(), deadline)
            return await self._wait(jobs, deadline, timer)

    def _score_jobs(self, sources: Sequence[str], targets: Sequence[str], options: ScoreOptions,
                    deadline: float | None) -> list[Job]:
        """Tokenize and validate (source, target) pairs into score jobs (not queued yet)."""
        if not self._worker.started:
            raise NotReady("the scheduler is not started")
        submitted = time.monotonic()
        if deadline is not None and deadline <= submitted:
            raise DeadlineExceeded("the deadline passed before the request was queued")
        for texts in (sources, targets):  # before tokenizing: a huge text costs nothing
            if not isinstance(texts, str) and isinstance(texts, Sequence):
                if len(texts) > self.settings.queue_size:
                    raise InvalidInput(f"{len(texts)} pairs in one request; at most "
                                       f"{self.settings.queue_size} are accepted")
                self.limits.check_texts(texts)
        requests = self.runner.score_requests(sources, targets, options, self.limits.tasks)
        self.limits.check_sources([r.source for r in requests])
        loop, jobs = asyncio.get_running_loop(), []
        for r in requests:
            r.tag = Job(r, loop, loop.create_future(), deadline, submitted, joins_previous=bool(jobs))
            jobs.append(r.tag)
        return jobs

    async def _wait(self, jobs: list[Job], deadline: float | None, timer: RequestTimer) -> list[Any]:
        """Queue the jobs and wait for their results, in order; on an error, the deadline or a
        cancellation the unfinished ones are withdrawn."""
        if not jobs:
            return []
        self._worker.enqueue(jobs)
        futures = [j.sink for j in jobs]
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                results = [await futures[0]] if len(futures) == 1 else list(await asyncio.gather(*futures))
        except TimeoutError:
            raise DeadlineExceeded("deadline exceeded before the result was ready") from None
        finally:
            unfinished = [j for j, f in zip(jobs, futures, strict=True)
                          if j.state != RequestStatus.DONE or not f.done()]
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
        with RequestTimer(self.recorder.stats) as timer:
            (job,) = self._jobs([text], dataclasses.replace(options, stream=True), deadline, stream=True)
            self._worker.enqueue([job])
            events: asyncio.Queue = job.sink
            when = _loop_time(deadline)
            try:
                # tokens (at most), then the result
                for _ in range(job.request.options.max_output_tokens + 1):
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
                raise RuntimeError("stream produced more events than max_output_tokens")
            finally:
                if job.state != RequestStatus.DONE:
                    self._worker.abandon([job])


def _answered(hits: list[Result], submitted: float) -> list[Result]:
    """The cache's results, each timed as ready now (no queue or compute time of its own)."""
    total_ms = (time.monotonic() - submitted) * 1e3
    for result in hits:
        result.timings.total_ms = total_ms
    return hits


def _loop_time(deadline: float | None) -> float | None:
    """A time.monotonic() deadline on the running loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def make_scheduler(mode: BatchingMode | str, runner: Runner, *, limits: RequestLimits | None = None,
                   cache: SentenceCache | None = None, **settings: Any) -> Scheduler:
    """A scheduler of a batching mode ("none", "dynamic", "continuous"; ValueError for another), with
    SchedulerSettings given as keywords, answering from `cache` when given."""
    chosen = SchedulerSettings(**settings)
    return Scheduler(runner, make_policy(mode, chosen), chosen, limits, cache=cache)
