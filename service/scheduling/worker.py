"""The inference worker thread behind a Scheduler: one loop of schedule -> execute -> update.

One thread owns a `DecodeBatch` and is the only one to call `add` / `step` / `cancel` / `clear`. The event
loop hands it `Job`s (one per text) through a bounded `JobQueue` guarded by a `threading.Condition`; the
worker sends token events, results and errors back through one `Mailbox` per event loop
(service/scheduling/jobs.py: at most one `loop.call_soon_threadsafe` pending), which resolves each job's
asyncio Future (submit) or feeds its asyncio.Queue (stream). The loop never waits on inference; the worker
never touches asyncio objects. What the loop calls (enqueue, abandon, drain, stop, the watchdog's answers) is
`WorkerControl` (service/scheduling/control.py).

Each round: **schedule** (under the lock: take the jobs whose callers gave up, ask the admission policy
(service/scheduling/policies.py) how many queued texts may join, and let the queue pick them: FIFO while rows
fit and the batch stays within its token budget), **execute** (outside the lock: cancel given-up and expired
jobs, encode the newcomers with `batch.add`, run one decoder step with `batch.step`), **update** (turn the
step's events into deliveries and send them). Score jobs (`ScoreRequest`s) are admitted by the same queue and
policy, a pair taking a row like a greedy text when it joins, but never join the decode batch: the score jobs
a round admits become one `ScoreWork` (the `Scorer`, service/runtime/decoding/scoring.py: a series of bounded
model runs), run one model run per round beside the decode step. While texts decode, Score runs take at most
SCORE_SHARE of the decode steps' time, so no translation waits for a whole Score call; with nothing decoding
they run back to back. While a ScoreWork runs, score jobs wait in the queue (texts behind them pass), so one
Score's memory is held at a time. A pair is answered when its chunk is done; withdrawn and expired pairs leave
as texts do. An exception in
add/step fails only the jobs of that batch with BatchFailed (`batch.clear()`), and the loop goes on. Idle
waits use the condition with a timeout: no busy waiting.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from service.domain.errors import BatchFailed, DeadlineExceeded, NotReady, ShuttingDown, error_id
from service.domain.types import (
    FinishReason,
    Hypothesis,
    ResolvedOptions,
    Result,
    ScoreRequest,
    Timings,
    TokenEvent,
)
from service.scheduling.control import WorkerControl
from service.scheduling.jobs import Job, RequestStatus
from service.scheduling.policies import QueueView

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5  # longest sleep of an idle worker between checks of its flags
SCORE_SHARE = 0.5  # while texts decode, Score runs take at most this fraction of the decode steps' time


class Worker(WorkerControl):
    """The thread that owns a DecodeBatch and drives it with jobs taken from a bounded queue."""

    # ----- the worker thread --------------------------------------------------------------
    def _run(self) -> None:
        """Thread body: iterate until asked to stop, then fail what is left."""
        try:
            while self._iterate():
                pass
        except BaseException:  # noqa: BLE001 - a thread that dies must still answer its callers
            self.crashed = True
            log.critical("the inference worker crashed; failing its requests", exc_info=True)
        finally:
            self._shutdown()

    def _iterate(self) -> bool:
        """One round of schedule -> execute -> update; False to exit."""
        with self._cond:  # schedule: who joins, who leaves
            newcomers = self._schedule()
            if newcomers is None:
                return False
            dropped, self._dropped = self._dropped, []
            self._in_hand = newcomers
        try:  # execute: leave, expire, encode the newcomers, one decoder step (results into the outbox)
            if dropped:
                self._drop(dropped)
            if self._timed:
                self._expire()
            scores = [j for j in newcomers if isinstance(j.request, ScoreRequest)]
            if scores:
                self._start_scoring(scores)
            t0 = time.perf_counter()
            if len(scores) < len(newcomers):
                self._add([j for j in newcomers if not isinstance(j.request, ScoreRequest)])
            if len(self.batch):
                self._step()
            self._decode_s += time.perf_counter() - t0
            if self._scoring is not None and self._score_turn():
                self._score_run()
        except Exception:  # a bug of ours, not of a request: fail the batch, keep serving
            what = _logged_failure("scheduler error")
            for j in newcomers:  # popped from the queue but never added
                if j.state == RequestStatus.ACTIVE and not self.batch.rows_of(j.request):
                    j.state = RequestStatus.DONE
                    self._outbox.append((j, BatchFailed(what)))
            self._fail_batch(what)
        self._in_hand = []
        self._flush()  # update: deliver what this round produced, refresh the gauges
        return True

    def _schedule(self) -> list[Job] | None:
        """Under the lock: jobs to add now (popped), [] if none, None to stop; waits when idle."""
        for attempt in range(2):  # decide, and once more after an idle wait
            if self.stopping:
                return None
            idle = not len(self.batch) and self._scoring is None
            if not (idle or len(self._queue)):  # decoding with nobody queued: nothing to admit
                return []
            oldest = self._queue.oldest_wait(time.monotonic())
            admission = self.policy.admit(QueueView(idle, self._queue.rows, oldest, self.draining))
            wait = admission.wait_s
            if admission.count and len(self._queue):
                room = self.max_tokens - self.batch.tokens if math.isfinite(self.max_tokens) else math.inf
                out, expired = self._queue.take(admission.count, self.batch.free_rows, time.monotonic(), room,
                                                idle, hold_scores=self._scoring is not None)
                self._outbox.extend(expired)
                return out
            if not idle or self._dropped or attempt:
                return []
            if not len(self._queue):
                self._idle_waiters.resolve()
            self._cond.wait(IDLE_WAIT_S if wait is None else min(wait, IDLE_WAIT_S))
        return []

    def _drop(self, jobs: list[Job]) -> None:
        """Free the rows of active jobs whose callers gave up."""
        for j in jobs:
            if self.batch.cancel(j.request) or self._withdraw_score(j):
                j.state = RequestStatus.DONE
                self._timed.discard(j)

    def _expire(self) -> None:
        """Fail active jobs past their deadline and free their rows."""
        now = time.monotonic()
        for j in [j for j in self._timed if now >= j.deadline]:
            self._timed.discard(j)
            if not self.batch.cancel(j.request):
                self._withdraw_score(j)
            j.state = RequestStatus.DONE
            steps = self._steps - j.admit_step
            error = DeadlineExceeded(f"deadline exceeded while decoding (after {steps} steps)")
            self._outbox.append((j, error))

    def _add(self, jobs: list[Job]) -> None:
        """Encode the newcomers into the batch (one hand-over: encoder runs by length group); on failure
        only they fail."""
        now = time.monotonic()
        for j in jobs:
            j.admitted = now
            self.recorder.admitted(now - j.enqueued, len(j.request.source))
        before = len(self.batch)
        self._busy_since = now
        t0 = time.perf_counter()
        try:
            self.batch.add([j.request for j in jobs])
        except Exception:
            what = _logged_failure(f"encoder failed for a batch of {len(jobs)} new text(s)")
            for j in jobs:
                j.state = RequestStatus.DONE
                self._outbox.append((j, BatchFailed(what)))
            if len(self.batch) != before:  # add was not all-or-nothing: the batch is suspect
                self._fail_batch(what)
            return
        finally:
            self._busy_since = None
        self.recorder.encoded(len(jobs), time.perf_counter() - t0)
        for j in jobs:
            j.admit_step = self._steps
            if j.deadline is not None:
                self._timed.add(j)
        self._fresh.extend(jobs)

    def _start_scoring(self, jobs: list[Job]) -> None:
        """Make these score jobs the ScoreWork the next rounds run (no model run yet)."""
        now = time.monotonic()
        for j in jobs:
            j.admitted = now
            self.recorder.admitted(now - j.enqueued, len(j.request.source))
            if j.deadline is not None:
                self._timed.add(j)
        if self.scorer is None:
            raise RuntimeError("a score job reached a worker without a scorer")
        self._scoring = self.scorer.work([j.request for j in jobs])
        self._scored = {j: i for i, j in enumerate(jobs)}
        self._score_s = self._decode_s = 0.0

    def _score_turn(self) -> bool:
        """Whether a Score run goes now: nothing decodes, or Score runs are within their share of the time."""
        return not len(self.batch) or self._score_s <= SCORE_SHARE * self._decode_s

    def _score_run(self) -> None:
        """One model run of the ScoreWork; answer the pairs it completed. On failure its pairs fail."""
        work, jobs = self._scoring, list(self._scored)
        assert work is not None
        self._busy_since = time.monotonic()
        t0 = time.perf_counter()
        try:
            answered = work.advance()
        except Exception:
            what = _logged_failure(f"scoring failed for {len(jobs)} pair(s)")
            for j in jobs:
                if j.state == RequestStatus.ACTIVE:
                    j.state = RequestStatus.DONE
                    self._timed.discard(j)
                    self._outbox.append((j, BatchFailed(what)))
            self._end_scoring()
            return
        finally:
            self._busy_since = None
        self._score_s += time.perf_counter() - t0
        self._score_total += time.perf_counter() - t0
        done = time.monotonic()
        for i, r in answered:
            j = jobs[i]
            if j.state != RequestStatus.ACTIVE:
                continue
            j.state = RequestStatus.DONE
            self._timed.discard(j)
            r.timings = Timings((j.admitted - j.enqueued) * 1e3, (done - j.admitted) * 1e3,
                                (done - j.submitted) * 1e3)
            self._outbox.append((j, r))
        if work.done:
            self.recorder.scored(len(jobs), self._score_total)
            self._end_scoring()

    def _withdraw_score(self, job: Job) -> bool:
        """Take an active score job out of the ScoreWork (its caller gave up); False if it is not in it."""
        index = self._scored.get(job)
        if index is None or self._scoring is None:
            return False
        self._scoring.withdraw(index)
        if self._scoring.done:
            self._end_scoring()
        return True

    def _end_scoring(self) -> None:
        """Forget the ScoreWork (its memory goes with it)."""
        self._scoring, self._scored, self._score_total = None, {}, 0.0

    def _step(self) -> None:
        """One decoder step; hand out token events and results; on failure the whole batch fails."""
        rows = self.batch.used_rows
        self._busy_since = time.monotonic()
        t0 = time.perf_counter()
        try:
            events = self.batch.step()
        except Exception:
            self._fail_batch(_logged_failure(f"decoder step failed for a batch of {len(self.batch)} text(s) "
                                             f"in {rows} rows"))
            return
        finally:
            self._busy_since = None
        self.recorder.stepped(time.perf_counter() - t0, rows)
        self._steps += 1
        now = time.monotonic()
        if self._fresh:
            for j in self._fresh:
                if j.state == RequestStatus.ACTIVE:
                    j.first_token, j.first_token_step = now, self._steps
                    self.recorder.first_token(now - j.submitted)
            self._fresh.clear()
        for ev in events:
            job = ev.request.tag
            if isinstance(ev, TokenEvent):
                self._outbox.append((job, ev))
            else:
                self._finish(job, ev.hypotheses, now)

    def _finish(self, job: Job, hyps: list[Hypothesis], now: float) -> None:
        """Build a finished job's Result and record its per-text metrics."""
        job.state = RequestStatus.DONE
        self._timed.discard(job)
        after_first = self._steps - job.first_token_step  # steps after the run that gave the first token
        per_token = (now - job.first_token) / after_first if after_first > 0 and job.first_token else None
        options = job.request.options
        terms: tuple[str, ...] = ()
        if isinstance(options, ResolvedOptions):  # own phrases by index, the glossary's terms by source
            terms = options.glossary_terms
            for h in hyps:
                h.unmet_phrases, h.unmet_terms = options.split_unmet(h.unmet_phrases)
        self.recorder.finished(len(hyps[0].tokens) if hyps else None, per_token,
                               len(options.required_phrases), len(hyps[0].unmet_phrases) if hyps else 0)
        self.recorder.glossary(len(terms), len(hyps[0].unmet_terms) if hyps else 0)
        timings = Timings((job.admitted - job.enqueued) * 1e3, (now - job.admitted) * 1e3,
                          (now - job.submitted) * 1e3)
        reason = hyps[0].finish_reason if hyps else FinishReason.CANCELLED
        self._outbox.append((job, Result(hyps, list(job.request.source), reason, timings,
                                         terms)))

    def _fail_batch(self, what: str) -> None:
        """Drop every active job with BatchFailed(what) and empty the batch."""
        for r in self.batch.clear():
            job = r.tag
            job.state = RequestStatus.DONE
            self._outbox.append((job, BatchFailed(what)))
        self._timed.clear()
        self._fresh.clear()

    def _flush(self) -> None:
        """Send the outbox to the jobs' event loops (one call per loop) and update the gauges."""
        gauges = (len(self._queue), len(self.batch))
        if gauges != self._gauges:
            self._gauges = gauges
            self.recorder.gauges(*gauges)
        self._outbox.send()

    def _shutdown(self) -> None:
        """Thread exit: fail queued and active jobs with ShuttingDown, then tell drain()."""
        with self._cond:
            queued = self._queue.clear()

        def error(when: str) -> Exception:
            """What a caller left behind hears."""
            if self.crashed:
                return NotReady("the inference worker stopped unexpectedly (error in the server log); "
                                "this server cannot translate")
            return ShuttingDown(f"{self.stop_why} {when}")

        for j in queued:
            j.state = RequestStatus.DONE
            self._outbox.append((j, error("before this text was decoded")))
        active = [*self._in_hand, *(r.tag for r in self.batch.requests), *self._scored]
        self._end_scoring()
        with contextlib.suppress(Exception):  # after a crash the batch may be beyond repair: drop it anyway
            self.batch.clear()
        for j in active:
            if j.state != RequestStatus.DONE:
                j.state = RequestStatus.DONE
                self._outbox.append((j, error("while this text was decoding")))
        self._in_hand = []
        self._timed.clear()
        self._flush()
        with self._cond:
            self.stopped = self.stopping = True
            self._idle_waiters.resolve()
            self._stop_waiters.resolve()


def _logged_failure(what: str) -> str:
    """Log the exception being handled under a new error id; the message for clients, with that id
    and without the exception's text (it may hold internals: paths, class names)."""
    eid = error_id()
    log.exception("%s [error id %s]", what, eid)
    return f"{what}; the server keeps serving (error id {eid}; details in the server log)"

