"""What a model is charged at its load under a memory budget (service/models/footprint.py): the warm-up
batches at the limits, their texts, and the self-attention cache's growth to the longest output, by hand;
and a charge measured on the tiny model, by sampling (where the kernel's peak cannot be reset)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions
from service.models.footprint import (
    WARMUP_STEPS,
    LimitBatch,
    cache_growth,
    charge_at_limits,
    limit_batches,
    text_of,
)
from service.ops.memory import resident_bytes
from service.runtime.runner import Runner
from service.scheduling.policies import SchedulerSettings, make_policy
from service.scheduling.scheduler import Scheduler


def test_the_batches_at_the_limits():
    # 2048 tokens: 32 rows of 64, and 8 rows of the longest source (256)
    assert limit_batches(32, 256, 2048) == [LimitBatch(32, 64), LimitBatch(8, 256)]
    assert limit_batches(32, 256) == [LimitBatch(32, 256)]  # no token budget: every row at the longest
    assert limit_batches(4, 256, 2048) == [LimitBatch(4, 256)]  # the budget holds every row at the longest
    assert limit_batches(32, 128, 16) == [LimitBatch(32, 2), LimitBatch(1, 128)]  # at least eos and a token


def test_a_text_is_the_most_words_within_the_tokens():
    def count(text: str) -> int:
        """A word per token and eos; a text beyond 20 tokens is refused, as the model's limit refuses."""
        n = len(text.split()) + 1
        if n > 20:
            raise InvalidInput("too long")
        return n

    assert len(text_of(count, 10, "a b c").split()) == 9
    assert text_of(count, 5, "a b c") == "a b c a"
    assert len(text_of(count, 50, "a b c").split()) == 19  # 20 words would be refused
    assert text_of(count, 1, "a b c") == "a"  # one word at least


@pytest.mark.parametrize(("layout", "expected"), [
    ("inplace", 2 * 98304 * (256 - 32)),  # columns: 32 after 8 tokens, 256 (max_len) after 255
    ("concat", 2 * 98304 * (256 - 9)),  # a column per token and the decoder start
])
def test_the_cache_grows_by_the_columns_to_the_longest_output_twice_over(layout, expected):
    # per column: 32 rows * 2 layers * (K, V) * 3 heads * 64 * 4 bytes = 98304
    spec = SimpleNamespace(n_decoder_layers=2, n_heads=3, d_head=64, cache_dtype=np.float32, max_len=256,
                           kv_cache=layout)
    assert cache_growth(spec, 32, 8, 255) == expected
    assert cache_growth(spec, 32, 255, 255) == 0
    half = SimpleNamespace(**{**vars(spec), "cache_dtype": np.float16})
    assert cache_growth(half, 32, 8, 255) == expected // 2


def test_a_charge_at_the_limits_runs_full_batches_and_holds_the_caches_growth(runner: Runner):
    settings = SchedulerSettings(max_batch_size=4, max_batch_tokens=64)
    limits = runner.limits()
    before = resident_bytes()

    async def main() -> tuple[int, list[int]]:
        scheduler = Scheduler(runner, make_policy("continuous", settings), settings, limits)
        await scheduler.start()
        try:
            charge = await charge_at_limits(runner, scheduler, before, DecodeOptions(), kernel_peak=False)
        finally:
            await scheduler.drain(0.0)
        stats = scheduler.recorder.stats.snapshot()
        return charge, sorted(n for n, runs in stats.batches.items() for _ in range(runs.count))

    charge, encoder_runs = asyncio.run(main())
    growth = cache_growth(runner.spec, 4, WARMUP_STEPS, limits.max_output_tokens)
    assert charge >= growth > 0
    # each batch at the limits joined at once: one encoder run of all its rows
    assert encoder_runs == sorted(b.rows for b in limit_batches(4, limits.max_source_tokens, 64))
