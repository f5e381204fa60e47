"""The worker's bounded FIFO (service/scheduling/jobqueue.py): bounds, withdrawal, who joins next."""

from __future__ import annotations

import math

import pytest

from service.domain.errors import DeadlineExceeded, QueueFull
from service.domain.types import DecodeOptions, Request, ScoreRequest
from service.scheduling.jobqueue import JobQueue
from service.scheduling.jobs import Job, RequestStatus


def job(tokens: int, beam: int = 1, deadline: float | None = None, joins_previous: bool = False) -> Job:
    """A queued job whose source has `tokens` ids (no event loop needed: the queue never touches it)."""
    request = Request(list(range(tokens)), DecodeOptions(beam_size=beam, n_best=1).resolved(64, 8))
    return Job(request, None, None, deadline, 0.0, joins_previous=joins_previous)  # type: ignore[arg-type]


def test_put_is_all_or_nothing_and_counts_rows() -> None:
    q = JobQueue(3)
    q.put([job(5), job(5, beam=4)], now=1.0)
    assert len(q) == 2 and q.rows == 5 and all(j.enqueued == 1.0 for j in q)
    with pytest.raises(QueueFull, match="2 of 3 texts queued, 2 more"):
        q.put([job(5), job(5)], now=2.0)
    assert len(q) == 2 and q.rows == 5
    assert q.oldest_wait(3.5) == 2.5 and JobQueue(1).oldest_wait(3.5) is None


def test_withdraw_only_takes_queued_jobs() -> None:
    q = JobQueue(4)
    a, b = job(5, beam=2), job(5)
    q.put([a, b], now=0.0)
    assert q.withdraw(a) and a.state == RequestStatus.DONE and q.rows == 1 and list(q) == [b]
    assert not q.withdraw(a)  # already out
    b.state = RequestStatus.ACTIVE
    assert not q.withdraw(b) and len(q) == 1


def test_take_is_fifo_while_rows_fit_and_the_head_is_never_overtaken() -> None:
    q = JobQueue(8)
    jobs = [job(10, beam=2), job(10, beam=3), job(10)]
    q.put(jobs, now=0.0)
    taken, expired = q.take(limit=8, free_rows=4, now=0.0)
    assert taken == jobs[:1] and not expired and jobs[0].state == RequestStatus.ACTIVE
    # the 1-row job waits behind
    assert list(q) == jobs[1:] and q.rows == 4 and jobs[2].state == RequestStatus.QUEUED
    taken, _ = q.take(limit=1, free_rows=8, now=0.0)
    assert taken == [jobs[1]]


def test_take_lets_sources_of_mixed_lengths_join_together() -> None:
    q = JobQueue(8)  # the batch encodes them in groups of similar length (runtime/decoding/encode_groups.py)
    jobs = [job(10), job(200), job(10)]
    q.put(jobs, now=0.0)
    taken, _ = q.take(limit=8, free_rows=8, now=0.0)
    assert taken == jobs and len(q) == 0


def test_texts_of_one_request_join_together_beyond_the_token_budget() -> None:
    q = JobQueue(8)
    first, second, other = job(10), job(200, joins_previous=True), job(10)
    q.put([first, second, other], now=0.0)
    taken, _ = q.take(limit=8, free_rows=8, now=0.0, free_tokens=15)
    assert taken == [first, second] and list(q) == [other]  # the next request waits for room


def test_take_fails_expired_jobs_even_when_they_would_not_fit() -> None:
    q = JobQueue(8)
    late, fine = job(10, beam=4, deadline=1.0), job(10, deadline=math.inf)
    q.put([late, fine], now=0.0)
    taken, expired = q.take(limit=8, free_rows=1, now=2.0)
    assert taken == [fine] and [j for j, _ in expired] == [late] and late.state == RequestStatus.DONE
    assert isinstance(expired[0][1], DeadlineExceeded) and q.rows == 0


def test_clear_marks_every_queued_job_done() -> None:
    q = JobQueue(4)
    jobs = [job(3), job(4)]
    q.put(jobs, now=0.0)
    assert q.clear() == jobs and len(q) == 0 and q.rows == 0
    assert all(j.state == RequestStatus.DONE for j in jobs)



def score_job(tokens: int, joins_previous: bool = False) -> Job:
    """A queued score job (one pair) whose source has `tokens` ids."""
    request = ScoreRequest(list(range(tokens)), [], [1, 2])
    return Job(request, None, None, None, 0.0, joins_previous=joins_previous)  # type: ignore[arg-type]


def test_while_a_score_runs_texts_pass_the_queued_score_jobs_which_keep_their_order() -> None:
    q = JobQueue(8)
    s1, s2, t1, t2 = score_job(3), score_job(3, joins_previous=True), job(3), job(3)
    q.put([s1, s2, t1, t2], now=0.0)
    out, expired = q.take(8, free_rows=8, now=1.0, hold_scores=True)
    assert out == [t1, t2] and not expired and list(q) == [s1, s2] and q.rows == 2
    out, _ = q.take(8, free_rows=8, now=1.0)
    assert out == [s1, s2] and not len(q) and q.rows == 0


def test_a_held_score_job_still_expires() -> None:
    q = JobQueue(4)
    late = score_job(3)
    late.deadline = 0.5
    q.put([late, job(3)], now=0.0)
    out, expired = q.take(4, free_rows=4, now=1.0, hold_scores=True)
    assert len(out) == 1 and [j for j, _ in expired] == [late] and isinstance(expired[0][1], DeadlineExceeded)
