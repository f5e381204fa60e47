"""Schedulers (none / dynamic / continuous) on the tiny bundle: same tokens as unbatched, joins, streams."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.domain.errors import DeadlineExceeded, InvalidInput, NotReady
from service.domain.types import BatchingMode, DecodeOptions, Result, TokenEvent
from service.scheduling.policies import ContinuousBatching, DynamicBatching, NoBatching
from service.scheduling.scheduler import SchedulerState, make_scheduler
from tests.support.corpus import tiny_pairs
from tests.support.decoding import MAX_NEW, assert_distinct, assert_same_hypotheses, reference
from tests.support.metrics import counts, delta
from tests.support.polling import until
from tests.support.scheduling import Gate, run

MODES = [mode.value for mode in BatchingMode]


# ----- construction ---------------------------------------------------------------------------
def test_make_scheduler_modes_and_config(runner):
    policies = {"none": NoBatching, "dynamic": DynamicBatching, "continuous": ContinuousBatching}
    for mode, cls in policies.items():
        s = make_scheduler(mode, runner, max_batch_size=5, max_queue_delay_ms=2.5, queue_size=7)
        assert isinstance(s.policy, cls) and s.mode == mode
        settings = s.settings
        assert (settings.max_batch_size, settings.max_queue_delay_ms, settings.queue_size) == (5, 2.5, 7)
        assert s.state is SchedulerState.NEW and not s.healthy
        assert s.queue_depth == 0 and s.active_sequences == 0
    assert s.settings.max_batch_tokens == 0  # no token budget unless asked
    assert make_scheduler("continuous", runner, max_batch_tokens=300).settings.max_batch_tokens == 300
    with pytest.raises(ValueError, match="max_batch_tokens must be >= 0"):
        make_scheduler("continuous", runner, max_batch_tokens=-5)
    with pytest.raises(ValueError, match="unknown batching mode 'orca'"):
        make_scheduler("orca", runner)
    with pytest.raises(AttributeError):
        s.settings.max_batch_size = 3  # read-only
    with pytest.raises(NotReady):
        run(s.submit(["we 5"], DecodeOptions()))


def test_invalid_requests_are_rejected_before_queueing(runner):
    async def main() -> None:
        s = make_scheduler("continuous", runner, max_batch_size=4, queue_size=3)
        await s.start()
        with pytest.raises(InvalidInput, match="text 1 is empty"):
            await s.submit(["we 5", " "], DecodeOptions())
        with pytest.raises(InvalidInput, match=r"5 rows \(beam_size, .*\) exceed the batch size 4"):
            await s.submit(["we 5"], DecodeOptions(beam_size=5))
        with pytest.raises(InvalidInput, match="4 texts in one request; at most 3"):
            await s.submit(["we 5"] * 4, DecodeOptions())
        with pytest.raises(InvalidInput, match="streaming needs beam_size 1"):
            _ = [e async for e in s.stream("we 5", DecodeOptions(beam_size=2))]
        with pytest.raises(DeadlineExceeded):
            await s.submit(["we 5"], DecodeOptions(), deadline=time.monotonic() - 1)
        assert s.queue_depth == 0 and await s.submit([], DecodeOptions()) == []
        await s.drain(5)

    run(main())


# ----- results equal unbatched decoding -------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
def test_concurrent_mixed_requests_equal_unbatched(runner, sched_texts, mode):
    opts = [DecodeOptions(beam_size=1 + i % 3, n_best=1 + (i % 3 > 0), max_output_tokens=MAX_NEW - i)
            for i in range(len(sched_texts))]
    want = [reference(runner, t, o) for t, o in zip(sched_texts, opts, strict=True)]
    multi = DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW)
    want_multi = [reference(runner, t, multi) for t in sched_texts[:3]]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])

    async def main() -> tuple[list[list[Result]], list[Result]]:
        s = make_scheduler(mode, runner, max_batch_size=6, max_queue_delay_ms=2.0)
        await s.start()
        singles = [s.submit([t], o) for t, o in zip(sched_texts, opts, strict=True)]
        *got, got_multi = await asyncio.gather(*singles, s.submit(sched_texts[:3], multi))
        assert s.queue_depth == 0 and s.active_sequences == 0
        await s.drain(5)
        return got, got_multi

    before = counts()
    got, got_multi = run(main())
    for (r,), w in zip(got, want, strict=True):
        assert_same_hypotheses(r.hypotheses, w)
    for r, w in zip(got_multi, want_multi, strict=True):
        assert_same_hypotheses(r.hypotheses, w)
    results = [r for (r,) in got] + got_multi
    all_texts = sched_texts + sched_texts[:3]
    for text, r in zip(all_texts, results, strict=True):
        assert r.source_ids == runner.encode_texts([text])[0]
        assert r.finish_reason == r.hypotheses[0].finish_reason
        t = r.timings
        assert t.queue_ms >= 0 and t.compute_ms > 0 and t.queue_ms + t.compute_ms <= t.total_ms + 1e-6
    d = delta(before)
    n = len(all_texts)
    assert d["queue_time_seconds"] == n and d["time_to_first_token_seconds"] == n
    assert d["input_tokens"] == n and d["input_tokens:sum"] == sum(len(r.source_ids) for r in results)
    assert d["output_tokens:sum"] == sum(len(r.hypotheses[0].tokens) for r in results)
    if mode == "none":
        assert d["encoder_compute_seconds"] == n  # one text per encoder run
        assert d["rows<=4.0"] == d["batch_size"]  # never more than one beam-3 text per step


def greedy_results(runner, mode: str, texts: list[str], opts: DecodeOptions) -> list[Result]:
    """Each text submitted at once to a scheduler of 4 rows, then drained; results in order."""
    async def main() -> list[Result]:
        s = make_scheduler(mode, runner, max_batch_size=4, max_queue_delay_ms=1.0)
        await s.start()
        got = await asyncio.gather(*(s.submit([t], opts) for t in texts))
        await s.drain(5)
        return [r for (r,) in got]

    return run(main())


def decoder_steps(results: list[Result]) -> list[int]:
    """Steps each greedy text was in the batch: one per generated token, eos included."""
    return [len(r.hypotheses[0].tokens) + (r.finish_reason == "eos") for r in results]


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_step_metrics_count_every_row_of_every_step(runner, sched_texts, mode):
    before = counts()
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    steps = decoder_steps(greedy_results(runner, mode, sched_texts[:8], opts))
    d = delta(before)
    assert d["batch_size:sum"] == sum(steps)
    assert d["time_per_output_token_seconds"] == sum(k > 1 for k in steps)
    if mode == "none":
        assert d["decoder_step_seconds"] == sum(steps) and d["rows<=1.0"] == d["batch_size"]
    else:
        assert d["decoder_step_seconds"] < sum(steps)  # texts shared steps


@pytest.mark.parametrize("mode", list(MODES))
def test_request_arriving_mid_decode_joins_only_in_continuous_mode(hooked, sched_texts, mode):
    a_opts = DecodeOptions(max_output_tokens=MAX_NEW)
    b_opts = DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW)
    want_a, want_b = reference(hooked, sched_texts[0], a_opts), reference(hooked, sched_texts[2], b_opts)
    assert len(want_a[0].tokens) > 6  # A is still decoding after 3 steps
    gate = Gate("decoder", at=(4,))
    hooked.fault_hook = gate

    async def main() -> tuple[Result, Result]:
        s = make_scheduler(mode, hooked, max_batch_size=4, max_queue_delay_ms=0.0)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], a_opts))
        await gate.wait()  # A made 3 steps and waits before its 4th
        b = asyncio.create_task(s.submit([sched_texts[2]], b_opts))
        await until(lambda: s.queue_depth == 1, "B queued")
        gate.release()
        (ra,), (rb,) = await asyncio.gather(a, b)
        await s.drain(5)
        return ra, rb

    before = counts()
    ra, rb = run(main())
    assert_same_hypotheses(ra.hypotheses, want_a)
    assert_same_hypotheses(rb.hypotheses, want_b)
    d = delta(before)
    three_rows = d["rows<=4.0"] - d["rows<=2.0"]  # steps with A (1 row) and B (2 rows) together
    second_encoder = gate.stages.index("encoder", 1)
    if mode == "continuous":
        assert gate.stages[:5] == ["encoder", "decoder", "decoder", "decoder", "decoder"]
        assert second_encoder == 5 and three_rows > 0  # B joined before A's 5th step
    else:
        assert second_encoder == 1 + len(want_a[0].tokens) + (ra.finish_reason == "eos") and three_rows == 0


def test_continuous_admission_is_fifo_a_wide_beam_is_not_overtaken(hooked, sched_texts):
    greedy, beam = DecodeOptions(max_output_tokens=MAX_NEW), DecodeOptions(beam_size=3,
                                                                           max_output_tokens=MAX_NEW)
    want_a = reference(hooked, sched_texts[0], greedy)
    gate = Gate("decoder", at=(2,))
    hooked.fault_hook = gate

    async def main() -> list[Result]:
        s = make_scheduler("continuous", hooked, max_batch_size=3)
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], greedy))  # 1 row of 3
        await gate.wait()
        b = asyncio.create_task(s.submit([sched_texts[1]], beam))  # needs all 3 rows: waits for A
        c = asyncio.create_task(s.submit([sched_texts[2]], greedy))  # would fit now, but must not overtake B
        await until(lambda: s.queue_depth == 2, "B and C queued")
        gate.release()
        got = [r for (r,) in await asyncio.gather(a, b, c)]
        await s.drain(5)
        return got

    ra, rb, rc = run(main())
    want = [want_a, reference(hooked, sched_texts[1], beam), reference(hooked, sched_texts[2], greedy)]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])
    for result, hyps in zip((ra, rb, rc), want, strict=True):
        assert_same_hypotheses(result.hypotheses, hyps)
    a_steps = len(want_a[0].tokens) + (ra.finish_reason == "eos")
    assert gate.stages.index("encoder", 1) == 1 + a_steps  # nobody joined while A was decoding


def test_stream_yields_tokens_then_the_result(runner, sched_texts):
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    want = reference(runner, sched_texts[0], opts)[0]

    async def main() -> list[Any]:
        s = make_scheduler("continuous", runner)
        await s.start()
        other = asyncio.create_task(s.submit(sched_texts[1:4], DecodeOptions(beam_size=2)))
        items = [e async for e in s.stream(sched_texts[0], opts)]
        await other
        await s.drain(5)
        return items

    items = run(main())
    *events, final = items
    assert isinstance(final, Result) and all(isinstance(e, TokenEvent) for e in events)
    assert [e.token for e in events] == final.hypotheses[0].tokens == want.tokens
    assert "".join(e.text for e in events) == final.hypotheses[0].text == want.text


@pytest.mark.parametrize(("mode", "one_request"), [
    ("continuous", False), ("continuous", True), ("dynamic", False),
])
def test_newcomers_of_mixed_lengths_join_in_one_hand_over(hooked, sched_texts, mode, one_request):
    """Queued texts of very different lengths join the batch together (the batch encodes them in groups
    of similar length, tests/service/runtime/test_encode_groups.py), and each decodes as it does alone."""
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    queued = ["we 5", sched_texts[4], " ".join(p[0] for p in tiny_pairs(6, 3))]  # short, short, long
    lengths = [len(ids) for ids in hooked.encode_texts(queued)]
    assert max(lengths) > 3 * min(lengths)
    gate = Gate("decoder", at=(1,))
    hooked.fault_hook = gate
    encoded: list[list[int]] = []  # source lengths of each encoder run

    async def main() -> list[Result]:
        s = make_scheduler(mode, hooked, max_batch_size=8, max_queue_delay_ms=0.0)
        add = s._worker.batch.add
        s._worker.batch.add = lambda reqs: (encoded.append([len(r.source) for r in reqs]), add(reqs))[1]
        await s.start()
        a = asyncio.create_task(s.submit([sched_texts[0]], opts))
        await gate.wait()  # A is decoding; the other texts queue behind it, in order
        if one_request:
            rest = [asyncio.create_task(s.submit(queued, opts))]
        else:
            rest = []
            for k, text in enumerate(queued):
                rest.append(asyncio.create_task(s.submit([text], opts)))
                await until(lambda k=k: s.queue_depth == k + 1, "queued")
        await until(lambda: s.queue_depth == 3, "three texts queued")
        gate.release()
        got = await asyncio.gather(a, *rest)
        await s.drain(5)
        return [r for results in got for r in results]

    results = run(main())
    want = [reference(hooked, t, opts) for t in [sched_texts[0], *queued]]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])
    for result, hyps in zip(results, want, strict=True):
        assert_same_hypotheses(result.hypotheses, hyps)
    first = len(hooked.encode_texts([sched_texts[0]])[0])
    assert encoded == [[first], lengths]


@pytest.mark.parametrize("budget", [0, 1])
def test_a_token_budget_keeps_texts_out_of_a_busy_batch(runner, sched_texts, budget):
    """With a 1-token budget every text waits for an empty batch (its head joins whatever its size);
    without one, concurrent texts share the batch. Results are the same either way."""
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    most = [0]

    def watch(stage: str) -> None:
        if stage == "decoder":
            most[0] = max(most[0], s.active_sequences)

    async def main() -> list[Result]:
        await s.start()
        got = await asyncio.gather(*(s.submit([t], opts) for t in sched_texts[:4]))
        await s.drain(5)
        return [r for (r,) in got]

    s = make_scheduler("continuous", runner, max_batch_size=8, max_batch_tokens=budget)
    runner.fault_hook = watch
    try:
        results = run(main())
    finally:
        runner.fault_hook = None
    want = [reference(runner, t, opts) for t in sched_texts[:4]]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])
    for result, hyps in zip(results, want, strict=True):
        assert_same_hypotheses(result.hypotheses, hyps)
    assert most[0] == 1 if budget else most[0] > 1
