"""Schedulers under pressure: full queue, deadlines, cancellation, failing batches, watchdog, drain."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.domain.errors import BatchFailed, DeadlineExceeded, QueueFull, ShuttingDown
from service.domain.types import DecodeOptions, Result
from service.scheduling.scheduler import SchedulerState, make_scheduler
from tests.support.decoding import MAX_NEW, assert_same_hypotheses, reference
from tests.support.metrics import sample
from tests.support.polling import until, wait_until
from tests.support.scheduling import LIMIT_S, Gate, gate_on, run


# ----- back-pressure, deadlines, cancellation -------------------------------------------------
def test_full_queue_rejects_with_queue_full(hooked, sched_texts):
    gate = Gate("decoder", at=(1,))
    hooked.fault_hook = gate
    opts = DecodeOptions(max_output_tokens=MAX_NEW)

    async def main() -> list[Result]:
        s = make_scheduler("continuous", hooked, max_batch_size=1, queue_size=2)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[1]], opts))
        await gate.wait()  # A holds the only row
        b = asyncio.create_task(s.submit(sched_texts[2:4], opts))  # fills the queue
        await until(lambda: s.queue_depth == 2, "queue filled")
        with pytest.raises(QueueFull, match="queue is full"):
            await s.submit([sched_texts[4]], opts)
        gate.release()
        (ra,), rb = await asyncio.gather(a, b)
        await s.drain(5)
        return [ra, *rb]

    got = run(main())
    for result, text in zip(got, sched_texts[1:4], strict=True):
        assert_same_hypotheses(result.hypotheses, reference(hooked, text, opts))


def test_deadline_in_queue_and_while_decoding_frees_rows(hooked, sched_texts):
    gate = Gate("decoder", at=(3,))
    hooked.fault_hook = gate
    opts = DecodeOptions(max_output_tokens=MAX_NEW)

    async def main() -> Result:
        s = make_scheduler("continuous", hooked, max_batch_size=4)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], opts, deadline=time.monotonic() + 0.3))
        await gate.wait()  # A is decoding
        with pytest.raises(DeadlineExceeded):
            await s.submit([sched_texts[1]], opts, deadline=time.monotonic() + 0.05)  # stuck in the queue
        assert s.queue_depth == 0
        with pytest.raises(DeadlineExceeded):
            await a
        gate.release()
        await until(lambda: s.active_sequences == 0, "A's rows freed")
        (r,) = await s.submit([sched_texts[2]], opts, deadline=time.monotonic() + 30)
        await s.drain(5)
        return r

    assert_same_hypotheses(run(main()).hypotheses, reference(hooked, sched_texts[2], opts))


def test_worker_expires_deadlines_before_each_step_without_the_event_loop(hooked, sched_texts):
    gate = Gate("decoder", at=(3, 4))
    hooked.fault_hook = gate
    opts = DecodeOptions(max_output_tokens=MAX_NEW)

    async def main() -> tuple[int, BaseException, Result]:
        s = make_scheduler("continuous", hooked, max_batch_size=4)
        await s.start()
        a_deadline = time.monotonic() + 0.2
        a = asyncio.create_task(s.submit([sched_texts[0]], opts, deadline=a_deadline))
        b = asyncio.create_task(s.submit([sched_texts[2]], opts))
        await gate.wait(3)
        # Block this event loop on purpose until A's deadline has passed: only the worker can notice it.
        wait_until(lambda: time.monotonic() > a_deadline, "A's deadline to pass")
        gate.release(3)
        assert gate.reached[4].wait(LIMIT_S)  # the worker checked deadlines and began the next step
        active = s.active_sequences
        gate.release(4)
        ea, (rb,) = await asyncio.gather(a, b, return_exceptions=True)
        await s.drain(5)
        return active, ea, rb

    active, ea, rb = run(main())
    assert active == 1  # A's row was freed by the worker while the event loop was blocked
    assert isinstance(ea, DeadlineExceeded)
    assert_same_hypotheses(rb.hypotheses, reference(hooked, sched_texts[2], opts))


def test_cancelling_the_awaiting_task_frees_its_slot(hooked, sched_texts):
    gate = Gate("decoder", at=(2,))
    hooked.fault_hook = gate
    opts = DecodeOptions(beam_size=3, max_output_tokens=MAX_NEW)

    async def main() -> Result:
        s = make_scheduler("continuous", hooked, max_batch_size=3)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], opts))
        await gate.wait()  # A holds all 3 rows, before its 2nd step
        b = asyncio.create_task(s.submit([sched_texts[1]], opts))
        await until(lambda: s.queue_depth == 1, "B queued")
        c = asyncio.create_task(s.submit([sched_texts[3]], opts))
        await until(lambda: s.queue_depth == 2, "C queued")
        b.cancel()
        a.cancel()
        for task in (a, b):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert s.queue_depth == 1  # B left the queue at once
        gate.release()
        (rc,) = await c
        assert s.active_sequences == 0
        await s.drain(5)
        return rc

    assert_same_hypotheses(run(main()).hypotheses, reference(hooked, sched_texts[3], opts))
    # C was encoded right after A's 2nd step: A's rows were freed, not decoded to the end
    assert gate.stages[:4] == ["encoder", "decoder", "decoder", "encoder"]


def test_closing_a_stream_early_stops_its_decoding(hooked, sched_texts):
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    want_first = reference(hooked, sched_texts[0], DecodeOptions(max_output_tokens=2))[0].tokens
    want = reference(hooked, sched_texts[4], opts)
    assert len(reference(hooked, sched_texts[0], opts)[0].tokens) > 5
    gate = Gate("decoder", at=(3,))
    hooked.fault_hook = gate

    async def main() -> tuple[list[Any], int, Result]:
        s = make_scheduler("continuous", hooked)
        await s.start()
        stream = s.stream(sched_texts[0], opts)
        first = [await anext(stream), await anext(stream)]
        await gate.wait()  # the worker is about to run step 3
        await stream.aclose()  # the client went away
        gate.release()
        await until(lambda: s.active_sequences == 0, "rows freed")
        steps = gate.counts["decoder"]
        (r,) = await s.submit([sched_texts[4]], opts)
        await s.drain(5)
        return first, steps, r

    first, steps, r = run(main())
    assert [e.token for e in first] == want_first
    assert steps == 3
    assert_same_hypotheses(r.hypotheses, want)


# ----- failures -------------------------------------------------------------------------------
def test_failed_decoder_step_fails_only_that_batch(hooked, sched_texts, caplog):
    hook = Gate(None, fail=lambda stage, n: stage == "decoder" and n == 2)
    hooked.fault_hook = hook
    opts = DecodeOptions(max_output_tokens=MAX_NEW)

    async def main() -> tuple[list[Any], Result, bool, int]:
        s = make_scheduler("dynamic", hooked, max_batch_size=8, max_queue_delay_ms=200.0)
        await s.start()
        calls = (s.submit([t], opts) for t in sched_texts[1:4])
        failed = await asyncio.gather(*calls, return_exceptions=True)
        assert s.active_sequences == 0  # the failed batch was cleared before its callers heard of it
        (after,) = await s.submit([sched_texts[4]], opts)
        healthy = s.healthy and s.active_sequences == 0
        await s.drain(5)
        return failed, after, healthy, hook.counts["decoder"]

    failed, after, healthy, steps = run(main())
    assert all(isinstance(e, BatchFailed) for e in failed)
    assert "decoder step failed for a batch of 3 text(s)" in str(failed[0])
    assert "injected" not in str(failed[0])  # the exception's text goes to the log, under the error id
    eid = str(failed[0]).split("error id ")[1][:12]
    logged = [r for r in caplog.records if eid in r.getMessage()]
    assert logged and "injected decoder failure" in (logged[0].exc_text or "")
    assert_same_hypotheses(after.hypotheses, reference(hooked, sched_texts[4], opts))
    assert healthy
    assert steps == 2 + len(after.hypotheses[0].tokens) + (after.finish_reason == "eos")  # no zombie rows


def test_failed_encoder_fails_only_the_newcomers(hooked, sched_texts, caplog):
    gate = Gate("decoder", at=(3,), fail=lambda stage, n: stage == "encoder" and n == 2)
    hooked.fault_hook = gate
    opts = DecodeOptions(max_output_tokens=MAX_NEW)

    async def main() -> tuple[Result, BaseException]:
        s = make_scheduler("continuous", hooked, max_batch_size=8)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], opts))
        await gate.wait()
        b = asyncio.create_task(s.submit(sched_texts[1:3], opts))
        await until(lambda: s.queue_depth == 2, "B queued")
        gate.release()
        (ra,), eb = await asyncio.gather(a, b, return_exceptions=True)
        await s.drain(5)
        return ra, eb

    ra, eb = run(main())
    assert isinstance(eb, BatchFailed) and "encoder failed for a batch of 2 new text(s)" in str(eb)
    assert "injected" not in str(eb)
    assert any("injected encoder failure" in (r.exc_text or "") for r in caplog.records)
    assert_same_hypotheses(ra.hypotheses, reference(hooked, sched_texts[0], opts))


def test_watchdog_reports_a_stuck_step(hooked, sched_texts):
    gate = Gate("decoder", at=(1,))
    hooked.fault_hook = gate

    async def main() -> Result:
        s = make_scheduler("continuous", hooked, watchdog_s=0.05)
        await s.start()
        assert s.healthy
        a = asyncio.create_task(s.submit([sched_texts[1]], DecodeOptions()))
        await gate.wait()
        await until(lambda: not s.healthy, "unhealthy while stuck")
        gate.release()
        (r,) = await a
        assert s.healthy
        await s.drain(5)
        return r

    assert_same_hypotheses(run(main()).hypotheses, reference(hooked, sched_texts[1], DecodeOptions()))


# ----- drain ----------------------------------------------------------------------------------
def test_drain_finishes_in_flight_work_and_rejects_new(hooked, sched_texts):
    opts = DecodeOptions(beam_size=2, max_output_tokens=MAX_NEW)
    want = [reference(hooked, t, opts) for t in sched_texts[:3]]
    gate = Gate("decoder", at=(1,))  # the worker holds at its first step: one text decoding, two queued
    hooked.fault_hook = gate

    async def main() -> list[Result]:
        s = make_scheduler("continuous", hooked, max_batch_size=2)
        await s.start()
        work = [asyncio.create_task(s.submit([t], opts)) for t in sched_texts[:3]]
        await gate.wait()
        await until(lambda: s.queue_depth == 2, "two texts queued behind the first")
        assert s.active_sequences == 1
        drain = asyncio.create_task(s.drain(30))
        await until(lambda: s.state == SchedulerState.DRAINING, "draining")
        with pytest.raises(ShuttingDown):
            await s.submit([sched_texts[4]], opts)
        gate.release()
        await drain
        assert s.state == SchedulerState.STOPPED and not s.healthy
        await s.drain(30)  # idempotent
        with pytest.raises(ShuttingDown):
            await s.start()
        return [r for (r,) in await asyncio.gather(*work)]

    got = run(main())
    assert len({str([h.tokens for h in hyps]) for hyps in want}) == 3  # all differ: a mix-up would show
    for result, hyps in zip(got, want, strict=True):
        assert_same_hypotheses(result.hypotheses, hyps)


def test_drain_fails_what_is_left_after_the_grace_period(hooked, sched_texts):
    gate = Gate("decoder", at=(1,))
    hooked.fault_hook = gate

    async def main() -> list[Any]:
        s = make_scheduler("continuous", hooked, max_batch_size=1)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], DecodeOptions()))
        await gate.wait()
        b = asyncio.create_task(s.submit([sched_texts[1]], DecodeOptions()))
        await until(lambda: s.queue_depth == 1, "B queued")
        drain = asyncio.create_task(s.drain(0.05))
        await until(lambda: s.state == SchedulerState.STOPPING, "grace period over")
        gate.release()
        await drain
        return await asyncio.gather(a, b, return_exceptions=True)

    ea, eb = run(main())
    assert isinstance(ea, ShuttingDown) and "while this text was decoding" in str(ea)
    assert isinstance(eb, ShuttingDown) and "before this text was decoded" in str(eb)
    assert sample("translator_active_sequences") == 0


def test_the_texts_a_drain_fails_hear_why_it_stopped(hooked, sched_texts):
    why = "model 'm' version 1 stopped serving (replaced by a reload)"

    async def main() -> None:
        s = make_scheduler("continuous", hooked, max_batch_size=1, queue_size=4)
        await s.start()
        with gate_on(hooked, Gate("decoder", at=(1,))) as gate:
            active = asyncio.ensure_future(s.submit(sched_texts[:1], DecodeOptions()))
            await gate.wait()
            queued = asyncio.ensure_future(s.submit(sched_texts[1:2], DecodeOptions()))
            await until(lambda: s.queue_depth == 1, "the second text queued")
            draining = asyncio.ensure_future(s.drain(0.0, why))
            await until(lambda: s._worker.stopping, "the worker asked to stop")
            gate.release()  # the held step ends; the worker then stops and fails both texts
            await draining
        for call, when in ((queued, "before this text was decoded"),
                           (active, "while this text was decoding")):
            with pytest.raises(ShuttingDown) as caught:
                await call
            assert str(caught.value) == f"{why} {when}"

    run(main())
