"""Score requests through the scheduler: the same queue, admission, deadlines, cancellation, failures and
drain as translations, scored by the worker thread between decode steps; interleaved with translations in
every batching mode, everything completes with the numbers of the in-process runner."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.domain.errors import BatchFailed, DeadlineExceeded, InvalidInput, NotReady
from service.domain.types import DecodeOptions, Result, ScoreOptions, ScoreResult
from service.scheduling.scheduler import make_scheduler
from tests.support.polling import until
from tests.support.scheduling import Gate, gate_on, run

MODES = ("none", "dynamic", "continuous")


@pytest.mark.parametrize("mode", MODES)
def test_scores_interleaved_with_translations_all_complete(runner, sched_texts, mode):
    greedy = [h[0] for h in runner.translate(sched_texts, DecodeOptions(max_output_tokens=40))]
    ended = [i for i, h in enumerate(greedy) if h.finish_reason == "eos"]  # a translation's eos: scored
    assert len(ended) >= len(greedy) // 2
    sched_texts, greedy = [sched_texts[i] for i in ended], [greedy[i] for i in ended]
    targets = [h.text for h in greedy]
    want = runner.score(sched_texts, targets)

    async def main() -> list:
        s = make_scheduler(mode, runner, max_batch_size=4, max_queue_delay_ms=2.0, queue_size=64)
        await s.start()
        calls = []
        for i, text in enumerate(sched_texts):
            calls.append(s.submit([text], DecodeOptions(max_output_tokens=40)))
            calls.append(s.score([text], [targets[i]]))
        calls.append(s.score(sched_texts, targets, ScoreOptions(return_alignment=True)))
        got = await asyncio.gather(*calls)
        assert s.queue_depth == 0 and s.active_sequences == 0
        await s.drain(5)
        return got

    got = run(main())
    *pairs, together = got
    for i, hyp in enumerate(greedy):
        (translated,), (scored,) = pairs[2 * i], pairs[2 * i + 1]
        assert isinstance(translated, Result) and translated.hypotheses[0].tokens == hyp.tokens
        assert isinstance(scored, ScoreResult)
        assert scored.log_probs == pytest.approx(want[i].log_probs, abs=1e-5)
        assert scored.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)
        t = scored.timings
        assert t.queue_ms >= 0 and t.compute_ms > 0 and t.queue_ms + t.compute_ms <= t.total_ms + 1e-6
    for r, w in zip(together, want, strict=True):
        assert r.log_prob == pytest.approx(w.log_prob, abs=1e-5) and len(r.alignment) == len(r.target_ids)


def test_bad_score_requests_are_refused_before_queueing(runner):
    async def main() -> None:
        s = make_scheduler("continuous", runner, max_batch_size=4, queue_size=3)
        with pytest.raises(NotReady):
            await s.score(["we 5"], ["x"], ScoreOptions())
        await s.start()
        bad = [([], [], "no .source, target. pair"), (["we 5"], [], "but 0 target"),
               (["we 5"] * 4, ["x"] * 4, "4 pairs in one request; at most 3"),
               (["we 5"], ["x " * 500], "target 0 is")]
        for sources, targets, message in bad:
            with pytest.raises(InvalidInput, match=message):
                await s.score(sources, targets, ScoreOptions())
        with pytest.raises(DeadlineExceeded):
            await s.score(["we 5"], ["x"], ScoreOptions(), deadline=time.monotonic() - 1)
        assert s.queue_depth == 0
        await s.drain(5)

    run(main())


def test_a_queued_score_expires_is_withdrawn_when_cancelled_and_the_worker_goes_on(hooked, sched_texts):
    async def main() -> None:
        s = make_scheduler("continuous", hooked, max_batch_size=1, queue_size=8)
        await s.start()
        with gate_on(hooked, Gate("decoder", at=(1,))) as gate:
            busy = asyncio.ensure_future(s.submit(sched_texts[:1], DecodeOptions()))  # holds the only row
            await gate.wait()
            with pytest.raises(DeadlineExceeded):
                await s.score(["we 5"], ["x"], ScoreOptions(), deadline=time.monotonic() + 0.2)
            cancelled = asyncio.ensure_future(s.score(["we 5"], ["x"], ScoreOptions()))
            await until(lambda: s.queue_depth == 1, "the score queued behind the busy row")
            cancelled.cancel()
            await until(lambda: s.queue_depth == 0, "the cancelled score withdrawn from the queue")
            gate.release()
            await busy
        (r,) = await s.score(["we 5"], ["x"], ScoreOptions())
        assert r.log_prob < 0
        await s.drain(5)

    run(main())


def test_a_failing_score_run_fails_only_its_pairs(hooked, sched_texts):
    async def main() -> None:
        s = make_scheduler("continuous", hooked, max_batch_size=4)
        await s.start()
        with gate_on(hooked, Gate(None, fail=lambda stage, n: stage == "encoder" and n == 1)):
            with pytest.raises(BatchFailed, match="scoring failed for 1 pair"):
                await s.score(["we 5"], ["x"], ScoreOptions())
            (r,) = await s.submit(sched_texts[:1], DecodeOptions())
            (scored,) = await s.score(["we 5"], ["x"], ScoreOptions())
        assert r.hypotheses and scored.log_prob < 0 and s.healthy
        await s.drain(5)

    run(main())


def test_drain_finishes_queued_scores(runner, sched_texts):
    async def main() -> list:
        s = make_scheduler("dynamic", runner, max_batch_size=2, max_queue_delay_ms=50.0)
        await s.start()
        calls = [asyncio.ensure_future(s.score([t], [t], ScoreOptions())) for t in sched_texts[:5]]
        await until(lambda: s.queue_depth + s.active_sequences > 0 or any(c.done() for c in calls),
                    "the scores queued")
        await s.drain(10)
        return await asyncio.gather(*calls)

    assert all(r.log_prob < 0 for (r,) in run(main()))


def test_a_long_score_does_not_hold_up_a_translation(runner, sched_texts):
    """The Score's runs (one position of one pair each, about a hundred) go one per round beside the decode
    steps: the translation (at most 8 steps) admitted after it finishes first; both have their numbers."""
    targets = [h[0].text for h in runner.translate(sched_texts[:8], DecodeOptions(max_output_tokens=40))]
    want_scores = runner.score(sched_texts[:8], targets)
    (want,) = runner.translate(sched_texts[1:2], DecodeOptions(max_output_tokens=8))

    async def main() -> None:
        s = make_scheduler("continuous", runner, max_batch_size=4, queue_size=64)
        s._worker.scorer = runner.new_scorer(4, run_tokens=1)  # one position of one pair per run
        await s.start()
        scoring = asyncio.ensure_future(s.score(sched_texts[:8], targets))
        translating = asyncio.ensure_future(s.submit(sched_texts[1:2], DecodeOptions(max_output_tokens=8)))
        done, _ = await asyncio.wait({scoring, translating}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {translating}
        (result,) = translating.result()
        assert result.hypotheses[0].tokens == want[0].tokens
        for got, w in zip(await scoring, want_scores, strict=True):
            assert got.log_probs == pytest.approx(w.log_probs, abs=1e-5)
        await s.drain(5)

    assert sum(len(t.target_ids) for t in want_scores) > 80  # the Score has that many runs
    run(main())


def test_a_score_cancelled_while_it_runs_leaves_the_worker_serving(hooked, sched_texts):
    async def main() -> None:
        s = make_scheduler("continuous", hooked, max_batch_size=4)
        s._worker.scorer = hooked.new_scorer(4, run_tokens=1)
        await s.start()
        with gate_on(hooked, Gate("decoder", at=(2,))) as gate:
            scoring = asyncio.ensure_future(s.score(sched_texts[:4], sched_texts[:4]))
            await gate.wait()  # the worker is inside the Score's second decoder run
            scoring.cancel()
            gate.release()
            with pytest.raises(asyncio.CancelledError):
                await scoring
        (r,) = await s.submit(sched_texts[:1], DecodeOptions())
        (scored,) = await s.score(["we 5"], ["x"], ScoreOptions())
        assert r.hypotheses and scored.log_prob < 0 and s.healthy
        await s.drain(5)
        assert s.queue_depth == 0 and s.active_sequences == 0

    run(main())
