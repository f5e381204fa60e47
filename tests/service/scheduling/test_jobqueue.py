"""The worker's bounded FIFO (service/scheduling/jobqueue.py): bounds, withdrawal, who joins next."""

from __future__ import annotations

import math

import pytest

from service.domain.errors import DeadlineExceeded, QueueFull
from service.domain.types import DecodeOptions, Request
from service.scheduling.jobqueue import PAD_SLACK_TOKENS, JobQueue
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


def test_take_stops_where_padding_would_exceed_the_limit() -> None:
    q = JobQueue(8, encoder_padding=0.5)
    short, long_ = job(10), job(200)
    q.put([short, long_, job(10)], now=0.0)
    pad = 2 * 200 - 210  # 190 padded tokens for 210 real ones: over max(0.5 * 210, 32)
    assert pad > max(0.5 * 210, PAD_SLACK_TOKENS) and not q.pads_well(2, 200, 210)
    taken, _ = q.take(limit=8, free_rows=8, now=0.0)
    assert taken == [short]  # the long one joins alone at the next encoder run
    taken, _ = q.take(limit=8, free_rows=8, now=0.0)
    assert taken == [long_]
    assert JobQueue(8).pads_well(2, 200, 210)  # no limit by default
    assert q.pads_well(2, 30, 30)  # 30 padded tokens are within the slack


def test_texts_of_one_request_join_together_however_they_pad() -> None:
    q = JobQueue(8, encoder_padding=0.0)
    first, second = job(10), job(200, joins_previous=True)
    q.put([first, second], now=0.0)
    taken, _ = q.take(limit=8, free_rows=8, now=0.0)
    assert taken == [first, second]


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


def test_encoder_padding_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="encoder_padding"):
        JobQueue(4, encoder_padding=-1.0)


def test_a_token_budget_admits_while_sources_fit_and_an_empty_batch_takes_its_head() -> None:
    q = JobQueue(8)
    jobs = [job(40), job(30, beam=2), job(10)]  # costs: 40, 60 (30 tokens x 2 rows), 10
    q.put(jobs, now=0.0)
    taken, _ = q.take(limit=8, free_rows=8, now=0.0, free_tokens=99)
    assert taken == jobs[:1]  # 40 fits, then 60 does not (39 left) and the 10 behind it waits
    taken, _ = q.take(limit=8, free_rows=8, now=0.0, free_tokens=70)
    assert taken == jobs[1:]  # 60 + 10
    big = job(500)
    q.put([big, job(5)], now=0.0)
    assert q.take(limit=8, free_rows=8, now=0.0, free_tokens=100)[0] == []
    taken, _ = q.take(limit=8, free_rows=8, now=0.0, free_tokens=100, idle=True)
    assert taken == [big]  # alone into the empty batch; the 5-token one would now exceed the budget
    q.clear()
    first, rest = job(50), job(50, joins_previous=True)
    q.put([first, rest], now=0.0)
    assert q.take(limit=8, free_rows=8, now=0.0, free_tokens=60)[0] == [first, rest]  # one request
