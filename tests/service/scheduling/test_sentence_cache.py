"""The sentence cache (service/scheduling/cache.py) on its own and in the scheduler: hits equal the uncached
decode and never reach the worker, the byte bound, alignment, options, owners, sampling, metrics, flag 0."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

from service.assembly import build_scheduler, sentence_cache
from service.config import ServerConfig
from service.domain.errors import InvalidInput, ShuttingDown
from service.domain.types import DecodeOptions, FinishReason, Hypothesis, ResolvedOptions, Result, Timings
from service.ops.model_metrics import ModelMetrics
from service.scheduling.cache import OPTIONS_BYTES, SentenceCache, entry_bytes
from service.scheduling.policies import SchedulerSettings, make_policy
from service.scheduling.scheduler import Scheduler
from service.server import BackgroundServer
from tests.support.decoding import MAX_NEW, assert_distinct, assert_same_hypotheses, reference
from tests.support.metrics import sample
from tests.support.scheduling import Gate, run
from tests.support.server import server_config

_names = itertools.count(1)
GREEDY = DecodeOptions(max_output_tokens=MAX_NEW)


def scheduler(runner, cache: SentenceCache | None) -> Scheduler:
    """A continuous scheduler of the runner answering from `cache`, recording under a model name of its
    own (its metric series start at 0)."""
    settings = SchedulerSettings(max_batch_size=8, queue_size=64)
    recorder = ModelMetrics(f"cache-test-{next(_names)}", "1")
    return Scheduler(runner, make_policy("continuous", settings), settings, recorder=recorder, cache=cache)


def counters(s: Scheduler) -> tuple[float, float]:
    """The scheduler's sentence-cache hits and misses so far."""
    labels = {"model": s.recorder.model, "version": s.recorder.version}
    return (sample("translator_sentence_cache_hits_total", **labels),
            sample("translator_sentence_cache_misses_total", **labels))


def decoded(s: Scheduler) -> int:
    """Texts the scheduler's worker decoded (inference_count of its statistics)."""
    return s.recorder.stats.snapshot().inference_count


def counting(runner) -> Gate:
    """A fault hook that only counts the runner's encoder and decoder runs."""
    gate = Gate(stage=None)
    runner.fault_hook = gate
    return gate


def result(tokens: int, source: int = 20, aligned: bool = False, text: str = "w", n_best: int = 1) -> Result:
    """A made-up result of `n_best` distinct hypotheses (for the cache alone)."""
    hyps = [Hypothesis(list(range(tokens)), f"{i}{text * tokens}", -1.5 - i, -0.5 - i, FinishReason.EOS,
                       np.full((tokens, source), 0.25, np.float32).tolist() if aligned else None)
            for i in range(n_best)]
    return Result(hyps, list(range(source)), FinishReason.EOS, Timings(1.0, 2.0, 3.0))


def key_of(cache: SentenceCache, source: list[int], owner: int = 1, **options):
    """The cache key of one source."""
    (key,) = cache.keys(owner, ResolvedOptions(**options), [source])
    return key


# ----- in the scheduler -----------------------------------------------------------------------
def test_hits_equal_the_uncached_decode_and_never_reach_the_worker(hooked, sched_texts):
    options = DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW)
    texts = sched_texts[:6]
    want = [reference(hooked, t, options) for t in texts]
    assert_distinct([[h.tokens for h in hyps] for hyps in want])
    cache = SentenceCache(1 << 20)

    async def main() -> tuple[list[Result], list[Result], list[Result], tuple[float, float], int, int]:
        plain, cached = scheduler(hooked, None), scheduler(hooked, cache)
        await plain.start()
        await cached.start()
        uncached = await plain.submit(texts, options)
        first = await cached.submit(texts, options)
        assert counters(cached) == (0, len(texts)) and decoded(cached) == len(texts)
        gate = counting(hooked)
        again = await cached.submit(texts, options)
        runs = gate.counts["encoder"] + gate.counts["decoder"]
        seen = counters(cached), decoded(cached), runs
        await plain.drain(5)
        await cached.drain(5)
        return uncached, first, again, *seen

    uncached, first, again, seen, decoded_texts, runs = run(main())
    assert seen == (len(texts), len(texts)) and decoded_texts == len(texts) and runs == 0
    for hyps, u, f, a in zip(want, uncached, first, again, strict=True):
        assert_same_hypotheses(u.hypotheses, hyps)
        assert_same_hypotheses(a.hypotheses, hyps)
        assert a.hypotheses == f.hypotheses and a.hypotheses == u.hypotheses  # tokens, text, scores, reason
        assert (a.source_ids, a.finish_reason) == (u.source_ids, u.finish_reason)
        assert (a.timings.queue_ms, a.timings.compute_ms) == (0.0, 0.0) and a.timings.total_ms >= 0
    assert a is not f and a.hypotheses[0] is not f.hypotheses[0]  # a fresh copy each time
    assert len(cache) == 0  # drained: its entries went with it


def test_a_request_decodes_only_its_misses_in_order(runner, sched_texts):
    cache = SentenceCache(1 << 20)
    texts = sched_texts[:5]
    want = [reference(runner, t, GREEDY)[0].tokens for t in texts]

    async def main() -> tuple[list[Result], int, tuple[float, float]]:
        s = scheduler(runner, cache)
        await s.start()
        await s.submit(texts[1::2], GREEDY)  # texts 1 and 3
        before = decoded(s)
        got = await s.submit(texts, GREEDY)
        out = got, decoded(s) - before, counters(s)
        await s.drain(5)
        return out

    got, newly, (hits, misses) = run(main())
    assert [r.hypotheses[0].tokens for r in got] == want
    assert newly == 3 and (hits, misses) == (2, 2 + 3)


def test_errors_and_draining_behave_as_without_a_cache(runner, sched_texts):
    cache = SentenceCache(1 << 20)

    async def main() -> None:
        s = scheduler(runner, cache)
        await s.start()
        await s.submit(sched_texts[:1], GREEDY)
        with pytest.raises(InvalidInput, match="text 1 is empty"):
            await s.submit([sched_texts[0], " "], GREEDY)  # a cached text does not save a bad request
        assert counters(s) == (0, 1)
        await s.drain(5)
        with pytest.raises(ShuttingDown):
            await s.submit(sched_texts[:1], GREEDY)  # drained: nothing answered, from the cache neither

    run(main())


def test_sampling_is_cached_only_with_a_seed(hooked, sched_texts):
    cache = SentenceCache(1 << 20)
    text = sched_texts[0]

    async def main() -> None:
        s = scheduler(hooked, cache)
        await s.start()
        gate = counting(hooked)
        unseeded = DecodeOptions(temperature=1.0, max_output_tokens=MAX_NEW)
        for _ in range(2):
            await s.submit([text], unseeded)
        assert gate.counts["encoder"] == 2 and len(cache) == 0 and counters(s) == (0, 0)  # never looked up
        seeded = DecodeOptions(temperature=1.0, seed=7, max_output_tokens=MAX_NEW)
        (first,) = await s.submit([text], seeded)
        (again,) = await s.submit([text], seeded)
        assert gate.counts["encoder"] == 3 and counters(s) == (1, 1)
        assert again.hypotheses == first.hypotheses
        (greedy,) = await s.submit([text], GREEDY)
        items = [item async for item in s.stream(text, GREEDY)]  # a stream is decoded, never looked up
        assert gate.counts["encoder"] == 5 and counters(s) == (1, 2)
        assert items[-1].hypotheses[0].tokens == greedy.hypotheses[0].tokens
        await s.drain(5)

    run(main())


def test_alignment_is_decoded_when_missing_then_serves_both(hooked, sched_texts):
    cache = SentenceCache(1 << 20)
    text = sched_texts[0]
    aligned = DecodeOptions(max_output_tokens=MAX_NEW, return_alignment=True)
    want = reference(hooked, text, aligned)[0]
    assert want.alignment

    async def main() -> None:
        s = scheduler(hooked, cache)
        await s.start()
        gate = counting(hooked)
        (plain,) = await s.submit([text], GREEDY)
        assert plain.hypotheses[0].alignment is None
        (first,) = await s.submit([text], aligned)  # the kept result has no alignment: decoded again
        assert gate.counts["encoder"] == 2 and counters(s) == (0, 2) and len(cache) == 1
        (again,) = await s.submit([text], aligned)
        (stripped,) = await s.submit([text], GREEDY)
        assert gate.counts["encoder"] == 2 and counters(s) == (2, 2)
        assert again.hypotheses[0].alignment == first.hypotheses[0].alignment
        np.testing.assert_allclose(again.hypotheses[0].alignment, want.alignment, atol=1e-5)
        assert stripped.hypotheses[0].alignment is None
        assert stripped.hypotheses[0].tokens == plain.hypotheses[0].tokens == want.tokens
        await s.drain(5)

    run(main())


def test_options_and_owners_make_different_entries(hooked, sched_texts):
    cache = SentenceCache(1 << 20)
    text = sched_texts[0]
    variants = [GREEDY, DecodeOptions(beam_size=2, max_output_tokens=MAX_NEW),
                DecodeOptions(max_output_tokens=5)]

    async def main() -> None:
        a, b = scheduler(hooked, cache), scheduler(hooked, cache)
        await a.start()
        await b.start()
        got = [(await a.submit([text], o))[0].hypotheses for o in variants]
        assert len(cache) == 3 and counters(a) == (0, 3)
        assert got[2][0].tokens == reference(hooked, text, variants[2])[0].tokens  # not the longer one's
        assert len(got[2][0].tokens) < len(got[0][0].tokens)
        await b.submit([text], GREEDY)  # another model copy: its own entry, decoded
        assert counters(b) == (0, 1) and len(cache) == 4
        await a.drain(5)  # a's entries go, b's stay
        assert len(cache) == 1
        gate = counting(hooked)
        await b.submit([text], GREEDY)
        assert gate.counts["encoder"] == 0 and counters(b) == (1, 1)
        await b.drain(5)
        assert len(cache) == 0

    run(main())


def test_flag_zero_is_no_cache(tiny_bundle, runner):
    assert sentence_cache(server_config(tiny_bundle, sentence_cache_bytes=0)) is None
    assert ServerConfig().sentence_cache_bytes == 64 << 20  # the default (docs/documents.md says why)
    assert sentence_cache(server_config(tiny_bundle, sentence_cache_bytes=5000)).max_bytes == 5000
    s = build_scheduler(server_config(tiny_bundle, sentence_cache_bytes=0), runner)
    assert s.cache is None

    async def main() -> int:
        await s.start()
        for _ in range(2):
            await s.submit(["we 5"], GREEDY)
        await s.drain(5)
        return decoded(s)

    assert run(main()) == 2


def test_the_server_shares_one_cache(tiny_bundle, runner):
    with BackgroundServer(server_config(tiny_bundle, sentence_cache_bytes=1 << 20), runner) as srv:
        scheduler_ = srv.running.scheduler
        assert isinstance(scheduler_.cache, SentenceCache) and scheduler_.cache.max_bytes == 1 << 20
        before = len(scheduler_.cache)
        srv.call(scheduler_.submit(["we 5 big."], GREEDY))
        assert len(scheduler_.cache) == before + 1
    with BackgroundServer(server_config(tiny_bundle, sentence_cache_bytes=0), runner) as srv:
        assert srv.running.scheduler.cache is None


# ----- the cache alone ------------------------------------------------------------------------
def test_the_byte_bound_evicts_the_least_recently_used():
    small = entry_bytes(np.arange(20, dtype=np.int32).tobytes(), [])  # an entry's size, for scale
    cache = SentenceCache(OPTIONS_BYTES + 3 * (small + 400))
    keys = [key_of(cache, [i, 1, 2]) for i in range(5)]
    for k in keys[:3]:
        cache.put(k, result(10))
    assert len(cache) == 3 and cache.bytes <= cache.max_bytes
    assert cache.get(keys[0], alignment=False) is not None  # 0 is now the most recent: 1 goes first
    cache.put(keys[3], result(10))
    assert [cache.get(k, False) is not None for k in keys[:4]] == [True, False, True, True]
    assert cache.bytes <= cache.max_bytes
    assert sample("translator_sentence_cache_bytes") == cache.bytes
    assert sample("translator_sentence_cache_entries") == len(cache) == 3
    cache.put(keys[4], result(cache.max_bytes))  # larger than the whole cache: not kept, nothing evicted
    assert cache.get(keys[4], False) is None and len(cache) == 3
    cache.put(keys[0], result(10, aligned=True))  # replaces 0, larger: the least recent (2) goes
    assert [cache.get(k, False) is not None for k in keys[:4]] == [True, False, False, True]
    assert cache.get(keys[0], alignment=True).hypotheses[0].alignment == result(10, aligned=True).hypotheses[
        0].alignment
    assert cache.bytes <= cache.max_bytes
    assert cache.drop(1) == 2 and cache.bytes == 0 and len(cache) == 0  # every byte counted was given back


def test_keys_of_sampling_and_owners():
    cache = SentenceCache(1 << 20)
    assert cache.keys(1, ResolvedOptions(temperature=1.0), [[1, 2]]) is None
    assert cache.keys(1, ResolvedOptions(temperature=1.0, seed=3), [[1, 2]]) is not None
    plain = key_of(cache, [5, 6])
    assert key_of(cache, [5, 6], return_alignment=True, stream=True) == plain  # shaping flags normalised
    assert key_of(cache, [5, 6], owner=2) != plain and key_of(cache, [5, 6], beam_size=2) != plain
    cache.put(plain, result(4))
    cache.put(key_of(cache, [5, 6], owner=2), result(4))
    assert cache.get(key_of(cache, [5, 6], owner=3), False) is None
    assert cache.drop(2) == 1 and cache.get(plain, False) is not None


@pytest.mark.parametrize("n_best", [1, 3])
@pytest.mark.parametrize("aligned", [False, True])
def test_bytes_counted_are_close_to_what_python_holds(aligned, n_best):
    sources = [list(range(i, i + 32)) for i in range(800)]
    cache = SentenceCache(1 << 30)
    cache.put(key_of(cache, [0]), result(1))  # the options, interned once
    tracemalloc.start()
    try:
        start, counted = tracemalloc.get_traced_memory()[0], cache.bytes
        for i, ids in enumerate(sources):  # distinct results, made here: what the cache keeps of them counts
            got = result(36, source=32, aligned=aligned, text=f"wörd{i} ", n_best=n_best)
            (key,) = cache.keys(1, ResolvedOptions(), [ids])
            cache.put(key, got)
            del got, key
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert 0.8 < (cache.bytes - counted) / held < 1.25, (cache.bytes - counted, held)
